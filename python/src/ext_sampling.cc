// python/src/ext_sampling.cc: bindings of gumbel noise / softmax / max, softmax_topk, sampling_filter,
// sample, soft_nms (smax/sampling.h).
// Conventions: ext_common.h.
#include "ext_common.h"

namespace smax_py __attribute__((visibility("hidden"))) {

void def_sampling(nb::module_& m) {
  m.def(
      "gumbel_noise",
      [](const Out& out, nb::handle seed, int64_t dim) {
        const char* op = "gumbel_noise";
        const uint64_t sd = seed_of(op, seed);
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::gumbel_noise(ov, sd, dim);
      },
      nb::arg("out"), nb::arg("seed"), nb::arg("dim"));
  m.def(
      "gumbel_softmax",
      [](const In& x, const Out& out, double tau, bool hard, nb::handle seed,
         const OptIn& noise, const OptOut& y_soft, const Co& co) {
        const char* op = "gumbel_softmax";
        const Common c = common(op, co);
        smax::GumbelSoftmaxOptions p;
        p.tau = static_cast<float>(tau);
        p.hard = hard;
        p.seed = seed_of(op, seed);
        p.noise = opt_flt(noise, op, "noise");
        p.y_soft = opt_flto(y_soft, op, "y_soft");
        const auto xv = flt(x, op, "logits");
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::gumbel_softmax(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("tau"), nb::arg("hard"), nb::arg("seed"),
      nb::arg("noise").none(), nb::arg("y_soft").none(), nb::arg("co"));
  m.def(
      "gumbel_softmax_backward",
      [](const In& y_soft, const In& dy, const Out& out, double tau, const Co& co) {
        const char* op = "gumbel_softmax_backward";
        const Common c = common(op, co);
        const auto yv = flt(y_soft, op, "y_soft");
        const auto dyv = flt(dy, op, "dy");
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::gumbel_softmax_backward(yv, dyv, ov, static_cast<float>(tau), c.o);
      },
      nb::arg("y_soft"), nb::arg("dy"), nb::arg("out"), nb::arg("tau"), nb::arg("co"));
  m.def(
      "gumbel_max",
      [](const In& x, const Out& indices, nb::handle seed, const Co& co) {
        const char* op = "gumbel_max";
        const Common c = common(op, co);
        const uint64_t sd = seed_of(op, seed);
        const auto xv = flt(x, op, "logits");
        const auto iv = i64o(indices, op, "indices");
        nb::gil_scoped_release r;
        smax::gumbel_max(xv, iv, sd, c.o);
      },
      nb::arg("x"), nb::arg("indices"), nb::arg("seed"), nb::arg("co"));
  m.def(
      "softmax_topk",
      [](const In& x, const Out& probs, const Out& indices, int64_t k, bool renormalize,
         const Co& co) {
        const char* op = "softmax_topk";
        const Common c = common(op, co);
        smax::SoftmaxTopkOptions p;
        p.k = k;
        p.renormalize = renormalize;
        const auto xv = flt(x, op, "x");
        const auto pv = flto(probs, op, "probs");
        const auto iv = i64o(indices, op, "indices");
        nb::gil_scoped_release r;
        smax::softmax_topk(xv, pv, iv, p, c.o);
      },
      nb::arg("x"), nb::arg("probs"), nb::arg("indices"), nb::arg("k"), nb::arg("renormalize"),
      nb::arg("co"));
  m.def(
      "sampling_filter",
      [](const In& x, const Out& out, double temperature, int64_t top_k, double top_p,
         double min_p, int64_t min_tokens_to_keep, const std::string& top_k_ties, const Co& co) {
        const char* op = "sampling_filter";
        const Common c = common(op, co);
        smax::SampleOptions p =
            sample_params(op, temperature, top_k, top_p, min_p, min_tokens_to_keep, top_k_ties);
        const auto xv = flt(x, op, "logits");
        const auto ov = flto(out, op, "out");
        nb::gil_scoped_release r;
        smax::sampling_filter(xv, ov, p, c.o);
      },
      nb::arg("x"), nb::arg("out"), nb::arg("temperature"), nb::arg("top_k"), nb::arg("top_p"),
      nb::arg("min_p"), nb::arg("min_tokens_to_keep"), nb::arg("top_k_ties"), nb::arg("co"));
  m.def(
      "sample",
      [](const In& x, const Out& indices, double temperature, int64_t top_k, double top_p,
         double min_p, int64_t min_tokens_to_keep, const std::string& top_k_ties,
         nb::handle seed, const Co& co) {
        const char* op = "sample";
        const Common c = common(op, co);
        smax::SampleOptions p =
            sample_params(op, temperature, top_k, top_p, min_p, min_tokens_to_keep, top_k_ties);
        p.seed = seed_of(op, seed);
        const auto xv = flt(x, op, "logits");
        const auto iv = i64o(indices, op, "indices");
        nb::gil_scoped_release r;
        smax::sample(xv, iv, p, c.o);
      },
      nb::arg("x"), nb::arg("indices"), nb::arg("temperature"), nb::arg("top_k"),
      nb::arg("top_p"), nb::arg("min_p"), nb::arg("min_tokens_to_keep"), nb::arg("top_k_ties"),
      nb::arg("seed"), nb::arg("co"));
  m.def(
      "soft_nms",
      [](const In& boxes, const In& scores, const Out& indices, const Out& kept_scores,
         const std::string& method, double sigma, double iou_threshold, double score_threshold,
         bool plus_one) {
        const char* op = "soft_nms";
        smax::SoftNmsOptions p;
        p.method = smax::parse_soft_nms_method(method);
        p.sigma = static_cast<float>(sigma);
        p.iou_threshold = static_cast<float>(iou_threshold);
        p.score_threshold = static_cast<float>(score_threshold);
        p.plus_one = plus_one;
        const auto bv = flt(boxes, op, "boxes");
        const auto sv = flt(scores, op, "scores");
        const auto iv = i64o(indices, op, "indices");
        const auto kv = flto(kept_scores, op, "kept_scores");
        nb::gil_scoped_release r;
        return smax::soft_nms(bv, sv, iv, kv, p);
      },
      nb::arg("boxes"), nb::arg("scores"), nb::arg("indices"), nb::arg("kept_scores"),
      nb::arg("method"), nb::arg("sigma"), nb::arg("iou_threshold"),
      nb::arg("score_threshold"), nb::arg("plus_one"));

}

}  // namespace smax_py
