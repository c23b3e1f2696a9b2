"""Integrations of smax with other libraries, each an optional extra:

* ``smax.integrations.transformers``: Hugging Face transformers models with
  smax attention and the fused linear cross-entropy loss
  (``pip install transformers``, or the ``hf`` extra of pyproject.toml).

Importing this package imports none of them.
"""
