// testing/table_sampling.cc: Gumbel-softmax, Gumbel-max, fused softmax +
// top-k and sampling in `smax run` (table in op_table.h). The noise is the
// library's counter-based Philox stream for --param seed, so --check compares
// with the oracle on the very same noise. Bounds: include/smax/sampling.h.
#include <cmath>

#include "op_table.h"
#include "reference/sampling.h"
#include "smax/sampling.h"

namespace smax_cli {
namespace {

namespace ref = smax::reference;

uint64_t seed_of(const ExtCall& c) { return static_cast<uint64_t>(c.param("seed")); }
smax::GumbelSoftmaxOptions gumbel_of(const ExtCall& c) {
  smax::GumbelSoftmaxOptions o;
  o.tau = static_cast<float>(c.param("tau"));
  o.hard = c.param("hard") != 0;
  o.seed = seed_of(c);
  return o;
}
smax::SampleOptions sample_of(const ExtCall& c) {
  smax::SampleOptions o;
  o.temperature = static_cast<float>(c.param("temperature"));
  o.top_k = static_cast<int64_t>(c.param("top_k"));
  o.top_p = static_cast<float>(c.param("top_p"));
  o.seed = seed_of(c);
  o.min_p = static_cast<float>(c.param("min_p"));
  o.min_tokens_to_keep = static_cast<int64_t>(c.param("min_tokens_to_keep"));
  o.top_k_ties = static_cast<smax::TopKTies>(static_cast<int32_t>(c.param("top_k_ties")));
  return o;
}
ExtParam seed_param() {
  return ExtParam{"seed", 1, "noise seed", ParamType::kInt}.fuzzed({1, 0, 12345, 9007199254740992.0}, {});
}

std::vector<double> as_double(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

void add_sampling_ops(std::vector<ExtOp>& ops) {
  const size_t first = ops.size();
  {
    ExtOp op;
    op.name = "gumbel_softmax";
    op.summary = "softmax((x + Gumbel noise) / tau), hard = straight-through one-hot";
    op.params = {ExtParam{"tau", 1, "temperature > 0"}.fuzzed({1, 0.5, 2, 0.01, 1}, {0, -1, NAN, INFINITY}),
                 ExtParam{"hard", 0, "true = straight-through one-hot", ParamType::kBool}.fuzzed({0, 1}, {}),
                 seed_param()};
    op.run = [](const ExtCall& c) { smax::gumbel_softmax(c.x, c.out, gumbel_of(c), c.options); };
    op.reference = [](const ExtCall& c) { return ref::gumbel_softmax(c.x, gumbel_of(c), c.options).dst; };
    op.c_run = [](const ExtCall& c, const CCall& k) {
      auto p = c_defaults(smax_gumbel_softmax_options_init);
      p.tau = gumbel_of(c).tau;
      p.hard = gumbel_of(c).hard ? 1 : 0;
      p.seed = gumbel_of(c).seed;
      return smax_gumbel_softmax(&k.x, &k.out, &p, &k.options);
    };
    op.bounds = [](ref::BoundRows& b) {
      // hard: the one-hot equals the oracle's exactly (a bound of 0).
      if (b.param("hard") == 0) ref::relative_bounds(b, 2e-6);
    };
    ops.push_back(op);
  }
  {
    ExtOp op;
    op.name = "gumbel_max";
    op.summary = "one sample per row: argmax(x + Gumbel noise)";
    op.out_shape = OutShape::kRows;
    op.index_output = true;
    op.check_indices = true;
    op.params = {seed_param()};
    op.run = [](const ExtCall& c) { smax::gumbel_max(c.x, c.out_index, seed_of(c), c.options); };
    op.reference = [](const ExtCall& c) { return as_double(ref::gumbel_max(c.x, seed_of(c), c.options)); };
    op.c_run = [](const ExtCall& c, const CCall& k) {
      return smax_gumbel_max(&k.x, &k.out_index, seed_of(c), &k.options);
    };
    ops.push_back(op);
  }
  {
    ExtOp op;
    op.name = "softmax_topk";
    op.summary = "fused softmax + top-k: probabilities and indices of the k best";
    op.out_shape = OutShape::kTopK;
    op.index_output = true;
    op.params = {ExtParam{"k", 50, "winners per row", ParamType::kInt}.fuzzed({0, 1, 2, 3, 5}, {-1})};
    op.run = [](const ExtCall& c) {
      smax::softmax_topk(c.x, c.out, c.out_index, static_cast<int64_t>(c.param("k")), c.options);
    };
    op.reference = [](const ExtCall& c) {
      smax::SoftmaxTopkOptions t;
      t.k = static_cast<int64_t>(c.param("k"));
      return ref::softmax_topk(c.x, t, c.options).probs;
    };
    op.c_run = [](const ExtCall& c, const CCall& k) {
      auto p = c_defaults(smax_softmax_topk_options_init);
      return smax_softmax_topk(&k.x, &k.out, &k.out_index, static_cast<int64_t>(c.param("k")), &p,
                               &k.options);
    };
    op.bounds = [](ref::BoundRows& b) { ref::relative_bounds(b, 2e-6); };
    ops.push_back(op);
  }
  {
    ExtOp op;
    op.name = "sample";
    op.summary = "one token per row: temperature -> top-k -> top-p -> min-p -> Gumbel-max";
    op.out_shape = OutShape::kRows;
    op.index_output = true;
    op.check_indices = true;
    op.params = {ExtParam{"temperature", 1, "0 = greedy"}.fuzzed({1, 0, 0.5, 2, 1}, {-1, NAN, INFINITY}),
                 ExtParam{"top_k", 50, "0 = off", ParamType::kInt}.fuzzed({50, 0, 1, 3, 0}, {-1}),
                 ExtParam{"top_p", 0.9, "nucleus mass"}.fuzzed({0.9, 1, 0.5, 0.01, 1}, {0, 1.5, -0.1, NAN}),
                 seed_param(),
                 ExtParam{"min_p", 0, "0 = off; keep p >= min_p * max p"}.fuzzed({0, 0.1, 0.05, 1, 0}, {-0.1, 1.5, NAN}),
                 ExtParam{"min_tokens_to_keep", 1, "floor of every filter", ParamType::kInt}.fuzzed({1, 2, 1, 5}, {-1}),
                 ExtParam{"top_k_ties", 0, "0 = exactly top_k, 1 = keep ties with the k-th", ParamType::kInt}.fuzzed({0, 1}, {2, -1})};
    op.run = [](const ExtCall& c) { smax::sample(c.x, c.out_index, sample_of(c), c.options); };
    op.reference = [](const ExtCall& c) { return as_double(ref::sample(c.x, sample_of(c), c.options)); };
    op.c_run = [](const ExtCall& c, const CCall& k) {
      auto p = c_defaults(smax_sample_options_init);
      p.temperature = sample_of(c).temperature;
      p.top_k = sample_of(c).top_k;
      p.top_p = sample_of(c).top_p;
      p.seed = sample_of(c).seed;
      p.min_p = sample_of(c).min_p;
      p.min_tokens_to_keep = static_cast<int32_t>(sample_of(c).min_tokens_to_keep);
      p.top_k_ties = static_cast<int32_t>(sample_of(c).top_k_ties);
      return smax_sample(&k.x, &k.out_index, &p, &k.options);
    };
    ops.push_back(op);
  }
  set_bound_header(ops, first, "include/smax/sampling.h");
}

}  // namespace smax_cli
