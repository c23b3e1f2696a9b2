#!/usr/bin/env python3
"""scripts/check_self_contained.py: no file cites documents outside the repository.

The repository owns everything its code and docs cite: formulas, hand
vectors, edge-case rules and design rules live under docs/ (docs/vectors.md,
docs/normalizers.md, docs/design.md, ...). This check fails, naming
FILE:LINE, when a file of the repository

  * names a path outside it: a spec file under a specs folder, the
    developers' shared material folder (by name, with or without a leading
    parent-directory step), the anchors style notes, or an upper-case design
    document (the project's own is the lower-case docs/design.md), or
  * cites an outside specification by section or by name: "spec §3",
    "(spec 2)", "the spec's", "spec vectors", "normalizers.md section 2", ...

Files: `git ls-files` (tracked, plus untracked files git does not ignore)
when the tree is a git checkout, otherwise every file under the root except
build*/ folders and hidden folders. Binary files are skipped.

  scripts/check_self_contained.py [--root DIR]

Exit status 0 when no file matches, 1 otherwise. Python 3 standard library
only (CTest `docs.self_contained`).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# This script names the patterns it looks for; it is the one file skipped.
SELF_REL = Path("scripts") / "check_self_contained.py"

# Each rule: (what it catches, pattern). The literal names are split so that
# the patterns do not match themselves (the file is skipped anyway).
_SPECS = "specs" + "/"
_SHARED = "shared" + "/"
_ANCHORS = "anchors" + "-style"
_DESIGN = "DESIGN" + r"\.md"
RULES: list[tuple[str, re.Pattern[str]]] = [
    ("a specs/ file outside the repository",
     re.compile(r"(?<![\w.-])" + _SPECS + r"[\w.-]+\.md")),
    ("a shared/ folder outside the repository",
     re.compile(r"(?<![\w-])(?:\.\./)*" + _SHARED)),
    ("the anchors style notes", re.compile(_ANCHORS)),
    ("an outside design document (the project's own is docs/design.md)",
     re.compile(r"\b" + _DESIGN)),  # case-sensitive: docs/design.md never matches
    ("a section sign citation", re.compile(r"§")),
    ("a spec citation by number",
     re.compile(r"(?i)\bspec(?:'s)?\s+(?:section\s+)?\d")),
    ("a spec citation in parentheses",  # not code such as f(spec, x) or (spec.k)
     re.compile(r"(?i)\(spec(?:\s*\)|\s*:|\s+\d|\s+OPEN|\s+points?|,\s*\d)")),
    ("a reference to 'the spec'", re.compile(r"(?i)\bthe\s+spec\b(?!ification)")),
    ("a reference to 'spec's'", re.compile(r"(?i)\bspec's\b")),
    ("a spec citation (vectors, points, defaults)",
     re.compile(r"(?i)\bspec\s+(?:hand\s+)?(?:vectors?|points?|default|OPEN)\b")),
    ("a 'Spec:' citation", re.compile(r"(?i)(?:^|[^\w.])spec:")),
    ("a numbered section of a markdown file",
     re.compile(r"(?i)\.md\s+section\s+\d")),
]


def tracked_files(root: Path) -> list[Path]:
    """Files of the repository, relative to root."""
    if (root / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                 "--exclude-standard"],
                check=True, capture_output=True).stdout
            names = sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n})
            return [Path(n) for n in names if (root / n).is_file()]
        except (OSError, subprocess.CalledProcessError):
            pass  # no git: walk the tree
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith("build") and not d.startswith(".")
                             and d != "__pycache__")
        for f in sorted(filenames):
            files.append((Path(dirpath) / f).relative_to(root))
    return files


def check(root: Path) -> list[str]:
    problems = []
    for rel in tracked_files(root):
        path = root / rel
        if rel == SELF_REL:
            continue
        try:
            data = path.read_bytes()
        except OSError as e:
            problems.append(f"{rel}: cannot read: {e}")
            continue
        if b"\0" in data:
            continue  # binary (images)
        text = data.decode("utf-8", "replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for what, rx in RULES:
                m = rx.search(line)
                if m:
                    problems.append(f"{rel}:{lineno}: {what}: {line.strip()}")
                    break
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root")
    args = ap.parse_args()
    root = args.root.resolve()
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} line(s) refer to documents outside the repository; "
              "cite the repository's own docs instead (docs/vectors.md, "
              "docs/normalizers.md, docs/design.md, ...)", file=sys.stderr)
        return 1
    print("self-contained: no file refers to documents outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
