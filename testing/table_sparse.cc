// testing/table_sparse.cc: sparsemax, entmax and sparse-softmax in
// `smax run` (table in op_table.h). Bounds of --check: include/smax/sparse.h.
#include <cmath>

#include "op_table.h"
#include "reference/reference.h"
#include "reference/sparse.h"
#include "smax/sparse.h"

namespace smax_cli {
namespace {

// From an ExtCall or a bound's BoundCall (both have param()).
template <class Call>
smax::EntmaxBisectOptions bisect_of(const Call& c) {
  smax::EntmaxBisectOptions b;
  b.alpha = static_cast<float>(c.param("alpha"));
  b.n_iter = static_cast<int>(c.param("n_iter"));
  return b;
}

template <class Call>
smax::reference::SparseLossSpec spec_of(smax::reference::SparseLossSpec::Which which, const Call& c) {
  smax::reference::SparseLossSpec s;
  s.which = which;
  if (which == smax::reference::SparseLossSpec::kBisect) s.bisect = bisect_of(c);
  if (which == smax::reference::SparseLossSpec::kTopK) s.k = static_cast<int64_t>(c.param("k"));
  return s;
}

// The C ABI's options struct of the same parameters.
smax_entmax_bisect_options c_bisect(const ExtCall& c) {
  auto p = c_defaults(smax_entmax_bisect_options_init);
  p.alpha = bisect_of(c).alpha;
  p.n_iter = bisect_of(c).n_iter;
  return p;
}
int64_t k_of(const ExtCall& c) { return static_cast<int64_t>(c.param("k")); }

const std::vector<ExtParam> kBisectParams = {
    ExtParam{"alpha", 1.5, "alpha > 1"}.fuzzed({1.5, 2.0, 1.2, 1.01, 3.0, 1.0, 1.75, 1.5},
                                               {0.5, NAN, INFINITY, 0.999}),
    ExtParam{"n_iter", 50, "bisection steps", ParamType::kInt}.fuzzed({50, 1, 5, 30, 50}, {0, -1})};
const std::vector<ExtParam> kTopKParams = {
    ExtParam{"k", 10, "entries kept per row", ParamType::kInt}.fuzzed({1, 2, 3, 10, 1000, 5}, {0, -1})};

}  // namespace

void add_sparse_ops(std::vector<ExtOp>& ops) {
  using Which = smax::reference::SparseLossSpec::Which;
  namespace ref = smax::reference;
  const size_t first = ops.size();
  // Forward normalisers.
  ops.push_back({"sparsemax", "Euclidean projection onto the simplex", OutShape::kSame, false,
                 false, false, {}, nullptr,
                 [](const ExtCall& c) { smax::sparsemax(c.x, c.out, c.options); },
                 [](const ExtCall& c) { return ref::sparsemax(c.x, c.options); }});
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_sparsemax(&k.x, &k.out, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) { ref::entmax_bounds(b, 2.0); };
  ops.push_back({"entmax15", "exact 1.5-entmax", OutShape::kSame, false, false, false, {},
                 nullptr, [](const ExtCall& c) { smax::entmax15(c.x, c.out, c.options); },
                 [](const ExtCall& c) { return ref::entmax15(c.x, c.options); }});
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_entmax15(&k.x, &k.out, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) { ref::entmax_bounds(b, 1.5); };
  ops.push_back({"entmax_bisect", "alpha-entmax by bisection", OutShape::kSame, false, false,
                 false, kBisectParams, nullptr,
                 [](const ExtCall& c) { smax::entmax_bisect(c.x, c.out, bisect_of(c), c.options); },
                 [](const ExtCall& c) { return ref::entmax_bisect(c.x, bisect_of(c), c.options); }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_entmax_bisect_options p = c_bisect(c);
    return smax_entmax_bisect(&k.x, &k.out, &p, &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) { ref::entmax_bounds(b, bisect_of(b.call).alpha); };
  ops.push_back({"sparse_softmax", "softmax over the k largest logits", OutShape::kSame, false,
                 false, false, kTopKParams, nullptr,
                 [](const ExtCall& c) {
                   smax::sparse_softmax(c.x, c.out, static_cast<int64_t>(c.param("k")), c.options);
                 },
                 [](const ExtCall& c) {
                   return ref::sparse_softmax(c.x, static_cast<int64_t>(c.param("k")), c.options);
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    return smax_sparse_softmax(&k.x, &k.out, k_of(c), &k.options);
  };
  ops.back().bounds = [](ref::BoundRows& b) { ref::relative_bounds(b, 2e-6); };
  // Backward passes (from the saved output y).
  ops.push_back({"sparsemax_backward", "VJP of sparsemax", OutShape::kSame, false, true, false,
                 {}, [](const ExtCall& c) { smax::sparsemax(c.x, c.out, c.options); },
                 [](const ExtCall& c) { smax::sparsemax_backward(c.y, c.dy, c.out, c.options); },
                 [](const ExtCall& c) { return ref::entmax_backward(c.y, c.dy, 2.0, c.options); }});
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_sparsemax_backward(&k.y, &k.dy, &k.out, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bound_rows = ref::BoundRowsFrom::kSavedY;
  ops.back().bounds = [](ref::BoundRows& b) { ref::entmax_backward_bounds(b, 2.0); };
  ops.push_back({"entmax15_backward", "VJP of 1.5-entmax", OutShape::kSame, false, true, false,
                 {}, [](const ExtCall& c) { smax::entmax15(c.x, c.out, c.options); },
                 [](const ExtCall& c) { smax::entmax15_backward(c.y, c.dy, c.out, c.options); },
                 [](const ExtCall& c) { return ref::entmax_backward(c.y, c.dy, 1.5, c.options); }});
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_entmax15_backward(&k.y, &k.dy, &k.out, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bound_rows = ref::BoundRowsFrom::kSavedY;
  ops.back().bounds = [](ref::BoundRows& b) { ref::entmax_backward_bounds(b, 1.5); };
  ops.push_back({"entmax_bisect_backward", "VJP of alpha-entmax", OutShape::kSame, false, true,
                 false, kBisectParams,
                 [](const ExtCall& c) { smax::entmax_bisect(c.x, c.out, bisect_of(c), c.options); },
                 [](const ExtCall& c) {
                   smax::entmax_bisect_backward(c.y, c.dy, c.out, std::nullopt, bisect_of(c),
                                                c.options);
                 },
                 [](const ExtCall& c) {
                   const auto b = bisect_of(c);
                   // alpha = 1 routes to softmax_backward (sparse.h).
                   if (b.alpha == 1.0f) return ref::softmax_backward(c.y, c.dy, c.options);
                   return ref::entmax_backward(c.y, c.dy, b.alpha, c.options, &b);
                 }});
  ops.back().c_run = [](const ExtCall& c, const CCall& k) {
    const smax_entmax_bisect_options p = c_bisect(c);
    return smax_entmax_bisect_backward(&k.y, &k.dy, &k.out, nullptr, &p, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bound_rows = ref::BoundRowsFrom::kSavedY;
  ops.back().bounds = [](ref::BoundRows& b) { ref::entmax_backward_bounds(b, bisect_of(b.call).alpha); };
  ops.push_back({"sparse_softmax_backward", "VJP of top-k softmax", OutShape::kSame, false, true,
                 false, kTopKParams,
                 [](const ExtCall& c) {
                   smax::sparse_softmax(c.x, c.out, static_cast<int64_t>(c.param("k")), c.options);
                 },
                 [](const ExtCall& c) { smax::sparse_softmax_backward(c.y, c.dy, c.out, c.options); },
                 // Defined as softmax_backward for any y (sparse.h).
                 [](const ExtCall& c) { return ref::softmax_backward(c.y, c.dy, c.options); }});
  ops.back().c_run = [](const ExtCall&, const CCall& k) {
    return smax_sparse_softmax_backward(&k.y, &k.dy, &k.out, &k.options);
  };
  ops.back().zeroes_masked_gradient = true;
  ops.back().bound_rows = ref::BoundRowsFrom::kSavedY;
  ops.back().bounds = [](ref::BoundRows& b) { ref::entmax_backward_bounds(b, 1.0); };
  // Losses (targets uniform over the classes; --reduction).
  struct LossSpec {
    const char* name;
    const char* summary;
    Which which;
    std::vector<ExtParam> params;
  };
  const LossSpec losses[] = {
      {"sparsemax_loss", "sparsemax loss (Martins & Astudillo)", Which::kSparsemax, {}},
      {"entmax15_loss", "1.5-entmax loss", Which::kEntmax15, {}},
      {"entmax_bisect_loss", "alpha-entmax loss", Which::kBisect, kBisectParams},
      {"sparse_softmax_loss", "top-k softmax loss", Which::kTopK, kTopKParams},
  };
  for (const LossSpec& l : losses) {
    const Which which = l.which;
    auto forward = [which](const ExtCall& c) {
      switch (which) {
        case Which::kSparsemax: smax::sparsemax_loss(c.x, c.target, c.out, c.loss, c.options); break;
        case Which::kEntmax15: smax::entmax15_loss(c.x, c.target, c.out, c.loss, c.options); break;
        case Which::kBisect:
          smax::entmax_bisect_loss(c.x, c.target, c.out, bisect_of(c), c.loss, c.options);
          break;
        case Which::kTopK:
          smax::sparse_softmax_loss(c.x, c.target, c.out, static_cast<int64_t>(c.param("k")), {},
                                    c.loss, c.options);
          break;
      }
    };
    ops.push_back({l.name, l.summary, OutShape::kLoss, true, false, false, l.params, nullptr,
                   forward,
                   [which](const ExtCall& c) {
                     return ref::sparse_loss(spec_of(which, c), c.x, c.target, c.loss, c.options);
                   }});
    ops.back().c_run = [which](const ExtCall& c, const CCall& k) {
      const auto topk = c_defaults(smax_sparse_softmax_loss_options_init);
      const auto bisect =
          which == Which::kBisect ? c_bisect(c) : c_defaults(smax_entmax_bisect_options_init);
      switch (which) {
        case Which::kSparsemax: return smax_sparsemax_loss(&k.x, &k.target, &k.out, &k.loss, &k.options);
        case Which::kEntmax15: return smax_entmax15_loss(&k.x, &k.target, &k.out, &k.loss, &k.options);
        case Which::kBisect:
          return smax_entmax_bisect_loss(&k.x, &k.target, &k.out, &bisect, &k.loss, &k.options);
        case Which::kTopK:
          return smax_sparse_softmax_loss(&k.x, &k.target, &k.out, k_of(c), &topk, &k.loss, &k.options);
      }
      return SMAX_STATUS_INTERNAL;
    };
    ops.back().bounds = [which](ref::BoundRows& b) {
      ref::SparseLossSpec spec = spec_of(which, b.call);
      spec.force_target = b.call.force_target;
      ref::sparse_loss_bounds(b, spec);
    };
    ops.push_back({std::string(l.name) + "_backward", std::string("gradient of ") + l.name,
                   OutShape::kLoss, true, true, false, l.params, nullptr,
                   [which](const ExtCall& c) {
                     switch (which) {
                       case Which::kSparsemax:
                         smax::sparsemax_loss_backward(c.x, c.target, c.dy, c.out, c.loss, c.options);
                         break;
                       case Which::kEntmax15:
                         smax::entmax15_loss_backward(c.x, c.target, c.dy, c.out, c.loss, c.options);
                         break;
                       case Which::kBisect:
                         smax::entmax_bisect_loss_backward(c.x, c.target, c.dy, c.out, bisect_of(c),
                                                           c.loss, c.options);
                         break;
                       case Which::kTopK:
                         smax::sparse_softmax_loss_backward(c.x, c.target, c.dy, c.out,
                                                            static_cast<int64_t>(c.param("k")), {},
                                                            c.loss, c.options);
                         break;
                     }
                   },
                   [which](const ExtCall& c) {
                     return ref::sparse_loss_backward(spec_of(which, c), c.x, c.target, c.dy,
                                                      c.loss, c.options);
                   }});
    ops.back().c_run = [which](const ExtCall& c, const CCall& k) {
      const auto topk = c_defaults(smax_sparse_softmax_loss_options_init);
      const auto bisect =
          which == Which::kBisect ? c_bisect(c) : c_defaults(smax_entmax_bisect_options_init);
      switch (which) {
        case Which::kSparsemax:
          return smax_sparsemax_loss_backward(&k.x, &k.target, &k.dy, &k.out, &k.loss, &k.options);
        case Which::kEntmax15:
          return smax_entmax15_loss_backward(&k.x, &k.target, &k.dy, &k.out, &k.loss, &k.options);
        case Which::kBisect:
          return smax_entmax_bisect_loss_backward(&k.x, &k.target, &k.dy, &k.out, &bisect, &k.loss,
                                                  &k.options);
        case Which::kTopK:
          return smax_sparse_softmax_loss_backward(&k.x, &k.target, &k.dy, &k.out, k_of(c), &topk,
                                                   &k.loss, &k.options);
      }
      return SMAX_STATUS_INTERNAL;
    };
    ops.back().bounds = [which](ref::BoundRows& b) {
      const double alpha = which == Which::kSparsemax  ? 2.0
                           : which == Which::kEntmax15 ? 1.5
                           : which == Which::kTopK     ? 1.0
                                                       : bisect_of(b.call).alpha;
      ref::sparse_loss_backward_bounds(b, alpha);
    };
  }
  set_bound_header(ops, first, "include/smax/sparse.h");
}

}  // namespace smax_cli
