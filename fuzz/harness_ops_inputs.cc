// fuzz/harness_ops_inputs.cc: the inputs' values, the options of a call and
// the call of the library
// (part of the ops harness, harness_ops.h; what the parts share:
// harness_ops_internal.h).
#include "harness_ops_internal.h"

namespace smax_fuzz {
namespace ops_internal {

template <class F>
void fill(Case& c, Operand& o, F&& value) {
  if (!o.present || o.unallocatable || o.null_data || o.rank_override != -1000) return;
  for (int64_t off : offsets_of(o)) {
    const size_t at = static_cast<size_t>(o.origin + off);
    if (o.arena == Arena::kF32) c.f32[at] = static_cast<float>(value());
    else if (o.arena == Arena::kI64) c.i64[at] = static_cast<int64_t>(value());
    else c.bytes[at] = static_cast<uint8_t>(value());
  }
}

void fill_inputs(Case& c, Reader& r) {
  std::vector<float> pool;
  for (int i = 0; i < 48 && r.left(); ++i) pool.push_back(logit(r));
  if (pool.empty()) pool.push_back(0.5f);
  size_t k = 0;
  auto next_logit = [&] { return pool[k++ % pool.size()]; };
  std::vector<float> gpool;
  for (int i = 0; i < 16 && r.left(); ++i) gpool.push_back(gradient(r));
  if (gpool.empty()) gpool.push_back(0.25f);
  size_t g = 0;
  auto next_grad = [&] { return gpool[g++ % gpool.size()]; };
  const OpDef& op = *c.op;

  if (op.custom == Custom::kSoftNms) {
    // Boxes: x1, y1, then widths; sometimes inverted or non-finite.
    const uint8_t style = r.u8();
    std::vector<float> vals;
    for (int64_t i = 0; i < c.N; ++i) {
      const float x1 = static_cast<float>(r.u8() % 32), y1 = static_cast<float>(r.u8() % 32);
      float w = static_cast<float>(r.u8() % 16), h = static_cast<float>(r.u8() % 16);
      if ((style & 7) == 0 && r.u8() < 8) w = -2.0f;  // x2 < x1 (- 1)
      vals.insert(vals.end(), {x1, y1, x1 + w, y1 + h});
      if ((style & 7) == 1 && r.u8() < 4) vals.back() = kNaN;
    }
    size_t vi = 0;
    fill(c, c.x, [&] { return vals[vi++]; });
    fill(c, c.y, [&] {
      const uint8_t b = r.u8();
      if ((style & 7) == 2 && b < 4) return kInf;
      return b % 8 == 0 ? 0.5f : static_cast<float>(b) / 256.0f;
    });
    // Model: invalid boxes / scores.
    if (!c.must_reject && !c.x.unallocatable) {
      const TensorView bv = view_of(c, c.x), sv = view_of(c, c.y);
      const std::vector<double> b = ref::to_dense(bv), s = ref::to_dense(sv);
      for (int64_t i = 0; i < c.N; ++i) {
        const double* q = &b[static_cast<size_t>(4 * i)];
        for (int j = 0; j < 4; ++j) {
          if (!std::isfinite(q[j])) reject(c, "non-finite box");
        }
        const double slack = c.nms.plus_one ? 1.0 : 0.0;
        if (q[2] < q[0] - slack || q[3] < q[1] - slack) reject(c, "inverted box");
        if (!std::isfinite(s[static_cast<size_t>(i)])) reject(c, "non-finite score");
      }
    }
    return;
  }
  if (op.custom == Custom::kLce || op.custom == Custom::kLceBackward || op.custom == Custom::kLceFused) {
    fill(c, c.hidden, [&] {
      const float v = next_logit();
      return std::isfinite(v) ? std::max(-64.0f, std::min(64.0f, v)) : v;
    });
    fill(c, c.lweight, [&] { return static_cast<float>(static_cast<int8_t>(r.u8())) / 32.0f; });
    fill(c, c.bias, [&] {
      const uint8_t b = r.u8();
      return b < 16 ? -kInf : static_cast<float>(static_cast<int8_t>(b)) / 8.0f;
    });
    fill(c, c.weight, [&] { return static_cast<float>(r.u8() % 4) / 2.0f; });
    fill(c, c.dloss, next_grad);
    fill(c, c.add_mask, next_logit);
    fill(c, c.target, [&] {
      const uint8_t b = r.u8();
      if (b >= 250) return static_cast<int64_t>(b == 255 ? c.V : -1);
      if (b >= 235) return c.loss.ignore_index;
      return c.V > 0 ? static_cast<int64_t>(b % c.V) : c.loss.ignore_index;
    });
  } else {
    fill(c, c.x, next_logit);
    fill(c, c.add_mask, next_logit);
    if (c.dy.present) fill(c, c.dy, next_grad);
    fill(c, c.weight, [&] { return static_cast<float>(r.u8() % 4) / 2.0f; });
    if (c.bool_mask.present) {
      const uint8_t style = r.u8();
      fill(c, c.bool_mask, [&] {
        const uint8_t b = r.u8();
        return style & 1 ? b : static_cast<uint8_t>(b & 1 ? 1 : (b & 2));
      });
    }
    if (c.target.arena == Arena::kF32) {  // probability targets: mostly in [0, 1], rows need not sum to 1
      fill(c, c.target, [&] {
        const uint8_t b = r.u8();
        const float q[] = {0.0f, 0.0f, 1.0f, 0.5f, 0.25f, 0.125f, 0.75f, 0.375f, 2.0f, 1e-30f};
        return b < 248 ? q[b % 8] : q[8 + b % 2];
      });
    } else {
      fill(c, c.target, [&] {
        const uint8_t b = r.u8();
        if (b >= 252) return static_cast<int64_t>(b == 255 ? c.n : b == 254 ? -1 : INT64_MAX);
        if (b >= 240) return c.loss.ignore_index;
        return c.n > 0 ? static_cast<int64_t>(b % c.n) : c.loss.ignore_index;
      });
    }
    // Per-row parameters: alpha (valid > 1, sometimes invalid), s (any
    // finite value; non-finite gives NaN rows).
    if (c.op->variant == Variant::kAlphaTensor) {
      fill(c, c.prow, [&] {
        const uint8_t b = r.u8();
        const float v[] = {1.5f, 2.0f, 1.2f, 1.01f, 3.0f, 1.75f, 1.5f, 1.333f};
        const float bad[] = {1.0f, 0.5f, kNaN, kInf, -2.0f, 0.999f};
        return b < 250 ? v[b % 8] : bad[b % 6];
      });
    } else if (c.op->variant == Variant::kSRows) {
      fill(c, c.prow, [&] {
        const uint8_t b = r.u8();
        const float v[] = {0.43f, 1.0f, 0.0f, -0.5f, 3.0f, 2.5f, 0.43f, 1e-3f};
        const float odd[] = {kNaN, kInf, -kInf, 1e30f};
        return b < 250 ? v[b % 8] : odd[b % 4];
      });
    }
  }
  // Model: alpha_tensor values finite and > 1.
  if (c.op->variant == Variant::kAlphaTensor && c.prow.present && !c.prow.unallocatable &&
      !c.prow.null_data && c.prow.rank_override == -1000 && !c.prow.wrong_dtype) {
    for (int64_t off : offsets_of(c.prow)) {
      const float a = c.f32[static_cast<size_t>(c.prow.origin + off)];
      if (!(std::isfinite(a) && a > 1.0f)) reject(c, "alpha_tensor value");
    }
  }
  // Model: targets in range.
  if (c.target.present && c.target.arena == Arena::kI64 && !c.target.unallocatable && !c.target.null_data &&
      c.target.rank_override == -1000 && !c.target.wrong_dtype) {
    for (int64_t off : offsets_of(c.target)) {
      const int64_t t = c.i64[static_cast<size_t>(c.target.origin + off)];
      if (t != c.loss.ignore_index && (t < 0 || t >= c.n)) reject(c, "target out of range");
    }
  }
  // y: the library's forward of x (or raw values).
  if (c.y.present && op.custom != Custom::kSoftNms) {
    c.raw_y = (r.u8() % 8) == 0;
    bool done = false;
    if (!c.raw_y && !c.must_reject && !c.y.unallocatable && numel_of(c.y.shape) > 0) {
      // Write through y's own layout (with overlapping strides later writes win).
      std::vector<float> dense(static_cast<size_t>(numel_of(c.y.shape)));
      std::vector<float> xs(dense.size());
      size_t i = 0;
      for (int64_t off : offsets_of(c.x)) xs[i++] = c.f32[static_cast<size_t>(c.x.origin + off)];
      TensorView xv = smax::make_view(xs.data(), DType::kF32, static_cast<int>(c.shape.size()),
                                      c.shape.data(), nullptr);
      TensorView yv = smax::make_view(dense.data(), DType::kF32, static_cast<int>(c.shape.size()),
                                      c.shape.data(), nullptr);
      try {
        if (op.custom == Custom::kGumbelSoftmaxBackward) {
          smax::GumbelSoftmaxOptions go;
          go.tau = static_cast<float>(c.params["tau"]);
          go.seed = 7;
          smax::gumbel_softmax(xv, yv, go, c.opt);
        } else if (op.variant == Variant::kAlphaTensor || op.variant == Variant::kSRows) {
          SoftmaxOptions fo = full_options(c);
          if (op.variant == Variant::kAlphaTensor) smax::entmax_bisect(xv, yv, bisect_options(c), fo);
          else smax::ssmax(xv, yv, ssmax_options(c), fo);
        } else {
          smax_cli::ExtCall fc = ext_call(c);
          fc.x = xv;
          fc.out = yv;
          op.ext->forward(fc);
        }
        i = 0;
        for (int64_t off : offsets_of(c.y)) c.f32[static_cast<size_t>(c.y.origin + off)] = dense[i++];
        done = true;
      } catch (const smax::Error&) {
      }
    }
    if (!done) {
      c.raw_y = true;
      fill(c, c.y, next_logit);
    }
  }
}

smax_cli::ExtCall ext_call(Case& c) {
  smax_cli::ExtCall e;
  if (c.x.present) e.x = view_of(c, c.x);
  if (c.y.present) e.y = view_of(c, c.y);
  if (c.dy.present) e.dy = view_of(c, c.dy);
  if (c.target.present) e.target = view_of(c, c.target);
  if (c.out.present) e.out = view_of(c, c.out);
  if (c.out_index.present) e.out_index = view_of(c, c.out_index);
  e.options = c.opt;
  if (c.add_mask.present) e.options.additive_mask = view_of(c, c.add_mask);
  if (c.bool_mask.present) e.options.bool_mask = view_of(c, c.bool_mask);
  e.loss = c.loss;
  if (c.weight.present) e.loss.weight = view_of(c, c.weight);
  e.params = c.params;
  return e;
}

smax::CrossEntropyOptions lce_ce(Case& c) {
  smax::CrossEntropyOptions ce;
  ce.loss = c.loss;
  if (c.weight.present) ce.loss.weight = view_of(c, c.weight);
  ce.label_smoothing = static_cast<float>(c.params["label_smoothing"]);
  ce.lse_square_scale = static_cast<float>(c.params["lse_square_scale"]);
  ce.softcap = static_cast<float>(c.params["softcap"]);
  return ce;
}

SoftmaxOptions full_options(Case& c) {
  SoftmaxOptions o = c.opt;
  if (c.add_mask.present) o.additive_mask = view_of(c, c.add_mask);
  if (c.bool_mask.present) o.bool_mask = view_of(c, c.bool_mask);
  return o;
}

smax::EntmaxBisectOptions bisect_options(Case& c) {
  smax::EntmaxBisectOptions b;
  b.alpha = static_cast<float>(c.params["alpha"]);
  b.n_iter = static_cast<int>(c.params["n_iter"]);
  if (c.prow.present) b.alpha_tensor = view_of(c, c.prow);
  return b;
}

smax::SampleOptions sample_options(Case& c) {
  smax::SampleOptions o;
  auto drawn = [&](const char* name, double fallback) {
    const auto it = c.params.find(name);
    return it == c.params.end() ? fallback : it->second;
  };
  o.temperature = static_cast<float>(drawn("temperature", o.temperature));
  o.top_k = static_cast<int64_t>(drawn("top_k", static_cast<double>(o.top_k)));
  o.top_p = static_cast<float>(drawn("top_p", o.top_p));
  o.seed = static_cast<uint64_t>(drawn("seed", static_cast<double>(o.seed)));
  o.min_p = static_cast<float>(drawn("min_p", o.min_p));
  o.min_tokens_to_keep =
      static_cast<int64_t>(drawn("min_tokens_to_keep", static_cast<double>(o.min_tokens_to_keep)));
  o.top_k_ties = static_cast<smax::TopKTies>(
      static_cast<int32_t>(drawn("top_k_ties", static_cast<double>(o.top_k_ties))));
  return o;
}

smax::SsmaxOptions ssmax_options(Case& c) {
  smax::SsmaxOptions o;
  o.s = static_cast<float>(c.params["s"]);
  o.fixed_n = static_cast<int64_t>(c.params["fixed_n"]);
  if (c.prow.present) o.s_rows = view_of(c, c.prow);
  return o;
}

smax::reference::SparseLossSpec force_spec(Case& c) {
  smax::reference::SparseLossSpec spec;
  spec.which = smax::reference::SparseLossSpec::kTopK;
  spec.k = static_cast<int64_t>(c.params["k"]);
  spec.force_target = true;
  return spec;
}

// cross_entropy's options, with the optional outputs of the forward when
// `outputs`.
smax::CrossEntropyOptions ce_options(Case& c, const smax::LossOptions& loss, bool outputs) {
  smax::CrossEntropyOptions ce;
  ce.loss = loss;
  ce.label_smoothing = static_cast<float>(c.params["label_smoothing"]);
  ce.lse_square_scale = static_cast<float>(c.params["lse_square_scale"]);
  ce.softcap = static_cast<float>(c.params["softcap"]);
  if (outputs) {
    if (c.ce_z.present) ce.z_loss = view_of(c, c.ce_z);
    if (c.ce_acc.present) ce.accuracy = view_of(c, c.ce_acc);
    if (c.ce_lse.present) ce.lse = view_of(c, c.ce_lse);
    if (c.ce_ent.present) ce.entropy = view_of(c, c.ce_ent);
    if (c.ce_tlp.present) ce.target_logprob = view_of(c, c.ce_tlp);
  }
  return ce;
}

// Calls a variant op with the options the table does not expose.
void invoke_variant(Case& c, const smax_cli::ExtCall& e) {
  const OpDef& op = *c.op;
  const bool backward = op.ext->needs_dy;
  switch (op.variant) {
    case Variant::kAlphaTensor:
      if (!backward) {
        smax::entmax_bisect(e.x, e.out, bisect_options(c), e.options);
      } else {
        std::optional<TensorView> da;
        if (c.dprow.present) da = view_of(c, c.dprow);
        smax::entmax_bisect_backward(e.y, e.dy, e.out, da, bisect_options(c), e.options);
      }
      break;
    case Variant::kSRows:
      if (!backward) {
        smax::ssmax(e.x, e.out, ssmax_options(c), e.options);
      } else {
        const TensorView ds = c.dprow.present ? view_of(c, c.dprow) : TensorView{};
        smax::ssmax_backward(e.x, e.y, e.dy, e.out, ssmax_options(c), e.options,
                             c.dprow.present ? &ds : nullptr);
      }
      break;
    case Variant::kForceTarget: {
      smax::SparseSoftmaxLossOptions so;
      so.force_target = true;
      const int64_t k = static_cast<int64_t>(c.params["k"]);
      if (!backward) smax::sparse_softmax_loss(e.x, e.target, e.out, k, so, e.loss, e.options);
      else smax::sparse_softmax_loss_backward(e.x, e.target, e.dy, e.out, k, so, e.loss, e.options);
      break;
    }
    case Variant::kProbTargets:
    case Variant::kCeOutputs:
      if (!backward) smax::cross_entropy(e.x, e.target, e.out, ce_options(c, e.loss, true), e.options);
      else smax::cross_entropy_backward(e.x, e.target, e.dy, e.out, ce_options(c, e.loss, false), e.options);
      break;
    case Variant::kNone: break;
  }
}

// The float64 oracle of the main output (dense, out's logical order).
std::vector<double> reference_of(Case& c, const smax_cli::ExtCall& e) {
  const OpDef& op = *c.op;
  const bool backward = op.ext->needs_dy;
  switch (op.variant) {
    case Variant::kAlphaTensor: {
      const smax::EntmaxBisectOptions b = bisect_options(c);
      if (!backward) return ref::entmax_bisect(e.x, b, e.options);
      return ref::entmax_backward(e.y, e.dy, 0.0, e.options, &b);
    }
    case Variant::kSRows:
      if (!backward) return ref::ssmax(e.x, ssmax_options(c), e.options);
      return ref::ssmax_backward(e.x, e.y, e.dy, ssmax_options(c), e.options);
    case Variant::kForceTarget:
      if (!backward) return ref::sparse_loss(force_spec(c), e.x, e.target, e.loss, e.options);
      return ref::sparse_loss_backward(force_spec(c), e.x, e.target, e.dy, e.loss, e.options);
    case Variant::kProbTargets:
    case Variant::kCeOutputs:
    case Variant::kNone: break;
  }
  return op.ext->reference(e);  // the table's oracle (cross_entropy takes f32 targets as well)
}

void invoke(Case& c, const SoftmaxOptions& opt_in, Extra* extra) {
  const OpDef& op = *c.op;
  Case& k = c;
  SoftmaxOptions opt = opt_in;
  if (k.add_mask.present) opt.additive_mask = view_of(k, k.add_mask);
  if (k.bool_mask.present) opt.bool_mask = view_of(k, k.bool_mask);
  if (op.ext) {
    smax_cli::ExtCall e = ext_call(k);
    e.options = opt;
    if (op.variant != Variant::kNone) invoke_variant(k, e);
    else op.ext->run(e);
    return;
  }
  switch (op.custom) {
    case Custom::kCollapse: {
      const smax::Precision p = static_cast<smax::Precision>(k.precision);
      const TensorView f = k.out.present ? view_of(k, k.out) : TensorView{};
      extra->collapse = smax::softmax_collapse_fraction(view_of(k, k.x), p, opt, k.out.present ? &f : nullptr);
      break;
    }
    case Custom::kGumbelNoise:
      smax::gumbel_noise(view_of(k, k.out), static_cast<uint64_t>(k.params["seed"]), opt.axis);
      break;
    case Custom::kGumbelSoftmaxBackward:
      smax::gumbel_softmax_backward(view_of(k, k.y), view_of(k, k.dy), view_of(k, k.out),
                                    static_cast<float>(k.params["tau"]), opt);
      break;
    case Custom::kSamplingFilter: {
      smax::sampling_filter(view_of(k, k.x), view_of(k, k.out), sample_options(k), opt);
      break;
    }
    case Custom::kSoftNms:
      if (k.nms_vector_api) {
        extra->nms = smax::soft_nms(view_of(k, k.x), view_of(k, k.y), k.nms);
      } else {
        extra->nms_count = smax::soft_nms(view_of(k, k.x), view_of(k, k.y), view_of(k, k.out_index),
                                          view_of(k, k.out), k.nms);
      }
      break;
    case Custom::kLce:
    case Custom::kLceBackward:
    case Custom::kLceFused: {
      const smax::CrossEntropyOptions ce = lce_ce(k);
      std::optional<TensorView> bias, dbias;
      if (k.bias.present) bias = view_of(k, k.bias);
      if (k.dbias.present) dbias = view_of(k, k.dbias);
      if (op.custom == Custom::kLce) {
        smax::linear_cross_entropy(view_of(k, k.hidden), view_of(k, k.lweight), view_of(k, k.target),
                                   bias, view_of(k, k.out), ce, k.lce, opt);
      } else if (op.custom == Custom::kLceBackward) {
        smax::linear_cross_entropy_backward(view_of(k, k.hidden), view_of(k, k.lweight),
                                            view_of(k, k.target), bias, view_of(k, k.dloss),
                                            view_of(k, k.dhidden), view_of(k, k.dweight), dbias, ce,
                                            k.lce, opt);
      } else {
        smax::linear_cross_entropy_fused(view_of(k, k.hidden), view_of(k, k.lweight),
                                         view_of(k, k.target), bias, view_of(k, k.out),
                                         view_of(k, k.dloss), view_of(k, k.dhidden),
                                         view_of(k, k.dweight), dbias, ce, k.lce, opt);
      }
      break;
    }
    case Custom::kNone: break;
  }
}

// Error-message prefixes an op may use: its own name, and the op it is
// documented to route to (entmax_bisect alpha = 1 and sparse_softmax k >= n
// are smax::softmax; sparse_softmax_backward is softmax_backward).
bool message_names_op(const std::string& op, const std::string& msg) {
  auto starts = [&](const std::string& p) { return msg.rfind(p + ":", 0) == 0 || msg.rfind(p + " ", 0) == 0; };
  if (starts(op)) return true;
  static const std::map<std::string, std::vector<std::string>> routes = {
      {"entmax_bisect", {"softmax"}},
      {"entmax_bisect_backward", {"softmax_backward"}},
      {"sparse_softmax", {"softmax"}},
      {"sparse_softmax_backward", {"softmax_backward"}},
  };
  const auto it = routes.find(op);
  if (it != routes.end()) {
    for (const std::string& p : it->second) {
      if (starts(p)) return true;
    }
  }
  return false;
}

std::string call(Case& c, const SoftmaxOptions& opt, bool* ok, Extra* extra) {
  return checked_call(
      [&] { invoke(c, opt, extra); },
      [&](const std::string& msg) { return message_names_op(c.op->name, msg); },
      [&](const std::string& what) { violation(c, what); }, ok);
}

}  // namespace ops_internal
}  // namespace smax_fuzz
