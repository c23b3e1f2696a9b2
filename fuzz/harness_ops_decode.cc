// fuzz/harness_ops_decode.cc: input values, operand strides and the decoding
// of one input into a Case (the decoding order is the corpora's format: do
// not reorder)
// (part of the ops harness, harness_ops.h; what the parts share:
// harness_ops_internal.h).
#include "harness_ops_internal.h"

namespace smax_fuzz {
namespace ops_internal {

// Logits: specials, denormals, huge, raw patterns, ties, ordinary values.
float logit(Reader& r) {
  const uint8_t k = r.u8();
  const unsigned kase = k % 24;
  if (kase < 10) return special_logit(kase, k, r);
  switch (kase) {
    case 10:
    case 11: return static_cast<float>(r.u8() % 4);  // ties
    case 12: return static_cast<float>(static_cast<int8_t>(r.u8())) / 1024.0f;  // near 0
    default: return static_cast<float>(static_cast<int8_t>(r.u8())) / 16.0f;
  }
}

float option_float(Reader& r) {
  const uint8_t k = r.u8();
  if (k < 200) return 1.0f;
  const float table[] = {0.5f, 2.0f, 1e-3f, 1e3f, 0.0f, -1.0f, kNaN, kInf,
                         3.0f, 0.125f, 1e-30f, 1e30f, 0.3f, -0.0f};
  return table[k % 14];
}

// The ops' stride draw (modes 0..2 and 8..11: row-major).
constexpr StrideModes kStrides{12, 24, 2, 2};

int esize_of(const Operand& o) {
  return o.arena == Arena::kBool ? 1 : o.arena == Arena::kI64 ? 8 : 4;
}

// Element sets / address intervals / identity of two operands: only operands
// of one arena meet (operands.h's predicates, per arena).
bool shares_element(const Operand& a, const Operand& b) {
  return a.arena == b.arena && share_element(a, b);
}

bool overlaps(const Operand& a, const Operand& b) {
  return a.arena == b.arena && !a.unallocatable && !b.unallocatable && ranges_overlap(a, b);
}

bool same_operand_view(const Operand& a, const Operand& b) {
  return a.arena == b.arena && same_view(a, b);
}

void set_operand(Operand& o, const char* name, std::vector<int64_t> shape, Arena a, bool input,
                 Reader& r) {
  o.name = name;
  o.present = true;
  o.arena = a;
  o.input = input;
  o.shape = std::move(shape);
  o.strides = decode_strides(o.shape, r, kStrides);
}

// A per-row parameter (alpha_tensor, s_rows): broadcast to the keepdim
// shape (leading dims dropped, some set to 1), sometimes not broadcastable.
std::vector<int64_t> row_param_shape(Case& c, Reader& r) {
  const int rank = static_cast<int>(c.keep_shape.size());
  const int prank = rank - static_cast<int>(r.u8() % (rank + 1));
  const uint8_t ones = r.u8();
  std::vector<int64_t> s;
  for (int d = 0; d < prank; ++d) {
    const int64_t full = c.keep_shape[static_cast<size_t>(rank - prank + d)];
    s.push_back((ones & (1u << d)) ? 1 : full);
  }
  if (r.u8() == 255 && prank > 0) s[0] += 1;
  return s;
}

// A per-row output: the rows' shape without the axis or keepdim; rarely a
// rank that is neither (must be rejected).
std::vector<int64_t> row_output_shape(Case& c, Reader& r) {
  const uint8_t b = r.u8();
  if (b == 255) {
    std::vector<int64_t> s = c.keep_shape;
    s.insert(s.begin(), 2);
    return s;
  }
  return (b & 1) ? c.keep_shape : c.rows_shape;
}

// A reduced-like-the-loss output (z_loss, accuracy): per row for kNone, else
// one element ([] or [1]); rarely a wrong shape.
std::vector<int64_t> loss_output_shape(Case& c, Reader& r) {
  if (c.loss.reduction == smax::Reduction::kNone) return row_output_shape(c, r);
  const uint8_t b = r.u8();
  if (b == 255) return {2};
  return (b & 1) ? std::vector<int64_t>{1} : std::vector<int64_t>{};
}

void decode_variant(Case& c, Reader& r) {
  const OpDef& op = *c.op;
  const bool backward = op.ext && op.ext->needs_dy;
  switch (op.variant) {
    case Variant::kAlphaTensor:
    case Variant::kSRows:
      set_operand(c.prow, op.variant == Variant::kAlphaTensor ? "alpha_tensor" : "s_rows",
                  row_param_shape(c, r), Arena::kF32, true, r);
      if (backward && (r.u8() & 1)) {
        set_operand(c.dprow, op.variant == Variant::kAlphaTensor ? "dalpha" : "ds",
                    row_output_shape(c, r), Arena::kF32, false, r);
      }
      break;
    case Variant::kProbTargets:
    case Variant::kCeOutputs: {
      if (backward) break;
      const uint8_t m = r.u8();
      if (m & 1) set_operand(c.ce_z, "z_loss", loss_output_shape(c, r), Arena::kF32, false, r);
      if (m & 2) set_operand(c.ce_acc, "accuracy", loss_output_shape(c, r), Arena::kF32, false, r);
      if (m & 4) set_operand(c.ce_lse, "lse", row_output_shape(c, r), Arena::kF32, false, r);
      if (m & 8) set_operand(c.ce_ent, "entropy", row_output_shape(c, r), Arena::kF32, false, r);
      if (m & 16) set_operand(c.ce_tlp, "target_logprob", row_output_shape(c, r), Arena::kF32, false, r);
      break;
    }
    case Variant::kForceTarget:
    case Variant::kNone: break;
  }
}

void decode_rowwise(Case& c, Reader& r) {
  const OpDef& op = *c.op;
  const smax_cli::ExtOp* ext = op.ext;
  // Rank and axis.
  const uint8_t rb = r.u8();
  c.rank = rb % 16 == 15 ? 4 : rb % 4;  // 0..3, sometimes 4
  if ((op.custom == Custom::kGumbelNoise || op.name == "softmax_topk") && c.rank == 0) c.rank = 1;
  c.shape.resize(static_cast<size_t>(c.rank));
  const int eff = std::max(c.rank, 1);
  const uint8_t ab = r.u8();
  int64_t axis;
  if (ab >= 248) {
    const int64_t bad[] = {eff, -eff - 1, eff + 3, 8, -9, INT64_MAX, INT64_MIN, 1000};
    axis = bad[ab % 8];
  } else {
    axis = (ab & 1) ? -1 - static_cast<int64_t>((ab >> 1) % eff) : static_cast<int64_t>((ab >> 1) % eff);
  }
  c.opt.axis = axis;
  c.axis_ok = axis >= -eff && axis < eff;
  c.ax = c.axis_ok ? static_cast<int>(axis < 0 ? axis + eff : axis) : eff - 1;
  for (int d = 0; d < c.rank; ++d) {
    const uint8_t s = r.u8();
    int64_t size = s < 6 ? 0 : 1 + s % 5;
    if (d == c.ax) {
      const uint8_t w = r.u8();
      size = s < 4 ? 0 : 1 + w % (s < 200 ? 12 : 300);
    }
    c.shape[static_cast<size_t>(d)] = size;
  }
  for (;;) {  // cap the element count
    int64_t prod = 1, largest = -1;
    for (int d = 0; d < c.rank; ++d) {
      const int64_t v = c.shape[static_cast<size_t>(d)];
      prod *= std::max<int64_t>(v, 1);
      if (d != c.ax && v > 1 && (largest < 0 || v > c.shape[static_cast<size_t>(largest)])) largest = d;
    }
    if (prod <= kMaxElements || largest < 0) break;
    c.shape[static_cast<size_t>(largest)] /= 2;
  }
  c.n = c.rank == 0 ? 1 : c.shape[static_cast<size_t>(c.ax)];
  std::vector<int64_t> rows_shape = c.shape;
  if (c.rank > 0) rows_shape.erase(rows_shape.begin() + c.ax);
  std::vector<int64_t> keep_shape = c.shape;
  if (c.rank > 0) keep_shape[static_cast<size_t>(c.ax)] = 1;
  c.rows_shape = rows_shape;
  c.keep_shape = keep_shape;

  // Options.
  c.opt.scale = option_float(r);
  c.opt.temperature = option_float(r);
  const uint8_t er = r.u8();
  c.opt.empty_row = static_cast<smax::EmptyRow>(er < 252 ? (er & 1) : (er == 252 ? 2 : -1));
  const uint8_t th = r.u8();
  c.opt.threads = th < 252 ? th % 4 : -1;
  const uint8_t al = r.u8();
  c.opt.algorithm = static_cast<smax::Algorithm>(al % 8 < 5 ? al % 8 : 0);

  // Parameters.
  if (ext) {
    for (const smax_cli::ExtParam& p : ext->params) {
      const ParamChoice& ch = param_choices(op.name, p.name);
      const uint8_t k = r.u8();
      // The per-row tensor overrides the scalar (kept valid here).
      if ((op.variant == Variant::kAlphaTensor && p.name == "alpha") ||
          (op.variant == Variant::kSRows && p.name == "s")) {
        c.params[p.name] = p.name == "alpha" ? 1.5 : 0.43;
        continue;
      }
      double v;
      if (k >= 246 && !ch.invalid.empty()) {
        v = ch.invalid[k % ch.invalid.size()];
        // sparse_softmax_backward does not take k (the table declares it).
        if (op.name != "sparse_softmax_backward") reject(c, "parameter " + p.name);
      } else if (k < 128) {
        v = p.fallback;
        if (op.name == "softmax_topk" && p.name == "k") v = std::min<double>(1, static_cast<double>(c.n));
      } else {
        v = ch.valid[k % ch.valid.size()];
      }
      if (op.name == "softmax_topk" && p.name == "k" && v > static_cast<double>(c.n)) {
        reject(c, "k > n");
      }
      if (p.name == "precision") v = k % 3 == 0 ? 32 : k % 3 == 1 ? 16 : -16;
      c.params[p.name] = v;
    }
  } else if (op.custom == Custom::kGumbelSoftmaxBackward) {
    const ParamChoice& ch = param_choices(op.name, "tau");
    const uint8_t k = r.u8();
    if (k >= 246) {
      c.params["tau"] = ch.invalid[k % ch.invalid.size()];
      reject(c, "parameter tau");
    } else {
      c.params["tau"] = k < 128 ? 1.0 : ch.valid[k % ch.valid.size()];
    }
  } else if (op.custom == Custom::kSamplingFilter) {
    for (const char* p : {"temperature", "top_k", "top_p", "seed", "min_p", "min_tokens_to_keep",
                          "top_k_ties"}) {
      const ParamChoice& ch = param_choices(op.name, p);
      const uint8_t k = r.u8();
      if (k >= 246 && !ch.invalid.empty()) {
        c.params[p] = ch.invalid[k % ch.invalid.size()];
        reject(c, std::string("parameter ") + p);
      } else {
        c.params[p] = ch.valid[k % ch.valid.size()];
      }
    }
  } else if (op.custom == Custom::kGumbelNoise) {
    c.params["seed"] = static_cast<double>(r.u16());
  } else if (op.custom == Custom::kCollapse) {
    c.precision = r.u8() % 3;
    c.want_flags = r.u8() & 1;
  }

  // Loss options.
  const bool has_target = ext && ext->needs_target;
  if (has_target) {
    const uint8_t red = r.u8();
    c.loss.reduction = static_cast<smax::Reduction>(red % 3);
    c.loss.empty_mean = static_cast<smax::EmptyMean>((red >> 2) & 1);
    const uint8_t ig = r.u8();
    c.loss.ignore_index = ig < 200 ? -100 : ig % 4;
  }

  // Operands.
  const bool gumbel_noise = op.custom == Custom::kGumbelNoise;
  const bool reads_y = (ext && ext->forward) || op.custom == Custom::kGumbelSoftmaxBackward;
  const bool needs_dy = (ext && ext->needs_dy) || op.custom == Custom::kGumbelSoftmaxBackward;
  const bool loss_bw = is_loss_backward(op);
  std::vector<int64_t> loss_shape =
      c.loss.reduction == smax::Reduction::kNone ? rows_shape : std::vector<int64_t>{};
  if (c.loss.reduction != smax::Reduction::kNone && (r.u8() & 3) == 0) loss_shape = {1};
  if (!gumbel_noise) set_operand(c.x, "src", c.shape, Arena::kF32, true, r);
  if (reads_y) set_operand(c.y, "y", c.shape, Arena::kF32, true, r);
  if (needs_dy) set_operand(c.dy, loss_bw ? "dloss" : "dy", loss_bw ? loss_shape : c.shape, Arena::kF32, true, r);
  if (has_target) {
    const bool keep_target = (r.u8() & 7) == 0;
    if (op.variant == Variant::kProbTargets) {
      set_operand(c.target, "target", c.shape, Arena::kF32, true, r);  // probabilities
    } else {
      set_operand(c.target, "target", keep_target ? keep_shape : rows_shape, Arena::kI64, true, r);
    }
    if ((r.u8() & 3) == 0) {
      set_operand(c.weight, "weight", {c.n}, Arena::kF32, true, r);
      if (r.u8() == 255) c.weight.shape = {c.n + 1};
    }
  }
  // Outputs.
  std::vector<int64_t> out_shape = c.shape;
  bool f32_out = true, idx_out = false;
  if (ext) {
    switch (ext->out_shape) {
      case smax_cli::OutShape::kSame: break;
      case smax_cli::OutShape::kRows: out_shape = (r.u8() & 1) ? keep_shape : rows_shape; break;
      case smax_cli::OutShape::kLoss: out_shape = ext->needs_dy ? c.shape : loss_shape; break;
      case smax_cli::OutShape::kTopK:
        if (c.rank > 0) out_shape[static_cast<size_t>(c.ax)] = static_cast<int64_t>(c.params["k"]);
        else out_shape = {};
        break;
    }
    f32_out = !ext->check_indices;
    idx_out = ext->index_output;
  } else if (op.custom == Custom::kCollapse) {
    f32_out = c.want_flags;
    out_shape = (r.u8() & 1) ? keep_shape : rows_shape;
  }
  if (f32_out) set_operand(c.out, ext && ext->needs_dy ? "dsrc" : "dst", out_shape, Arena::kF32, false, r);
  if (idx_out) set_operand(c.out_index, "indices", out_shape, Arena::kI64, false, r);

  // Masks (not for gumbel_noise, which has no options).
  const uint8_t mk = gumbel_noise ? 0 : r.u8();
  if ((mk & 3) == 1) set_operand(c.add_mask, "additive_mask", {}, Arena::kF32, true, r);
  if ((mk & 12) == 4) set_operand(c.bool_mask, "bool_mask", {}, Arena::kBool, true, r);
  for (Operand* m : {&c.add_mask, &c.bool_mask}) {
    if (!m->present) continue;
    const int mrank = c.rank - static_cast<int>(r.u8() % (c.rank + 1));
    const uint8_t ones = r.u8();
    m->shape.clear();
    for (int d = 0; d < mrank; ++d) {
      const int64_t full = c.shape[static_cast<size_t>(c.rank - mrank + d)];
      m->shape.push_back((ones & (1u << d)) ? 1 : full);
    }
    if (r.u8() == 255 && mrank > 0) m->shape[0] += 1;
    m->strides = decode_strides(m->shape, r, kStrides);
  }
  decode_variant(c, r);
}

void decode_soft_nms(Case& c, Reader& r) {
  const int64_t N = r.u8() % 24;
  c.N = N;
  set_operand(c.x, "boxes", {N, 4}, Arena::kF32, true, r);
  set_operand(c.y, "scores", {N}, Arena::kF32, true, r);
  const uint8_t m = r.u8();
  c.nms.method = static_cast<smax::SoftNmsMethod>(m < 250 ? m % 3 : (m == 250 ? 3 : -1));
  if (m >= 250) reject(c, "method");
  const float sig[] = {0.5f, 0.1f, 2.0f, 0.5f, 0.0f, -1.0f, kNaN, kInf};
  const uint8_t sb = r.u8();
  c.nms.sigma = sig[sb < 240 ? sb % 4 : 4 + sb % 4];
  if (sb >= 240) reject(c, "sigma");
  const float iou[] = {0.3f, 0.5f, 0.0f, 1.0f, -0.1f, 1.5f, kNaN, kInf};
  const uint8_t ib = r.u8();
  c.nms.iou_threshold = iou[ib < 240 ? ib % 4 : 4 + ib % 4];
  if (ib >= 240) reject(c, "iou_threshold");
  const float st[] = {0.001f, 0.0f, 0.5f, -1.0f, kNaN, kInf, 0.001f, 0.2f};
  const uint8_t tb = r.u8();
  c.nms.score_threshold = st[tb < 240 ? (tb % 2 ? 6 + tb % 2 : tb % 4) : 4 + tb % 2];
  if (tb >= 240) reject(c, "score_threshold");
  c.nms.plus_one = r.u8() & 1;
  c.nms_vector_api = r.u8() & 1;
  if (!c.nms_vector_api) {
    set_operand(c.out_index, "indices", {N}, Arena::kI64, false, r);
    set_operand(c.out, "kept_scores", {N}, Arena::kF32, false, r);
    if (r.u8() == 255) c.out.shape = {N + 1};
  }
}

void decode_lce(Case& c, Reader& r) {
  c.N = r.u8() % 7;
  c.D = r.u8() % 9;
  c.V = r.u8() % 41;
  c.shape = {c.N, c.V};
  c.rank = 2;
  c.n = c.V;
  c.ax = 1;
  const uint8_t ab = r.u8();
  c.opt.axis = ab < 200 ? (ab & 1 ? -1 : 1) : (ab % 2 ? 0 : -2);
  if (ab >= 200) reject(c, "axis");
  c.opt.scale = option_float(r);
  c.opt.temperature = option_float(r);
  const uint8_t er = r.u8();
  c.opt.empty_row = static_cast<smax::EmptyRow>(er & 1);
  c.opt.threads = r.u8() % 4;
  for (const char* p : {"label_smoothing", "lse_square_scale", "softcap"}) {
    const ParamChoice& ch = param_choices(c.op->name, p);
    const uint8_t k = r.u8();
    if (k >= 248) {
      c.params[p] = ch.invalid[k % ch.invalid.size()];
      reject(c, std::string("parameter ") + p);
    } else {
      c.params[p] = k < 128 ? 0.0 : ch.valid[k % ch.valid.size()];
    }
  }
  const uint8_t red = r.u8();
  c.loss.reduction = static_cast<smax::Reduction>(red % 3);
  c.loss.empty_mean = static_cast<smax::EmptyMean>((red >> 2) & 1);
  c.loss.ignore_index = r.u8() < 220 ? -100 : 0;
  const uint8_t ch = r.u8();
  c.lce.token_chunk = ch % 4;
  c.lce.vocab_chunk = (ch >> 2) % 8;
  if (ch >= 250) {
    c.lce.token_chunk = -1;
    reject(c, "token_chunk");
  }
  c.lce_bias = r.u8() & 1;
  c.lce_dbias = r.u8() & 1;
  set_operand(c.hidden, "hidden", {c.N, c.D}, Arena::kF32, true, r);
  set_operand(c.lweight, "weight", {c.V, c.D}, Arena::kF32, true, r);
  set_operand(c.target, "target", {c.N}, Arena::kI64, true, r);
  if (c.lce_bias) set_operand(c.bias, "bias", {c.V}, Arena::kF32, true, r);
  if ((r.u8() & 7) == 0) set_operand(c.weight, "class_weight", {c.V}, Arena::kF32, true, r);
  std::vector<int64_t> loss_shape =
      c.loss.reduction == smax::Reduction::kNone ? std::vector<int64_t>{c.N} : std::vector<int64_t>{};
  const bool fwd = c.op->custom != Custom::kLceBackward;
  const bool bwd = c.op->custom != Custom::kLce;
  if (fwd) set_operand(c.out, "dst", loss_shape, Arena::kF32, false, r);
  if (bwd) {
    set_operand(c.dloss, "dloss", loss_shape, Arena::kF32, true, r);
    set_operand(c.dhidden, "dhidden", {c.N, c.D}, Arena::kF32, false, r);
    set_operand(c.dweight, "dweight", {c.V, c.D}, Arena::kF32, false, r);
    if (c.lce_dbias) set_operand(c.dbias, "dbias", {c.V}, Arena::kF32, false, r);
  }
  if ((r.u8() & 31) == 0) {
    set_operand(c.add_mask, "additive_mask", {c.V}, Arena::kF32, true, r);
    reject(c, "masks are not supported");
  }
}

// An output whose strides fold indices together by the library's documented
// (conservative) rule: sorted by |stride|, each stride must exceed the
// extent of the smaller dims. Such an output may be rejected even when it
// never writes one element twice (docs/reliability.md).
bool folds(const Operand& o) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (size_t d = 0; d < o.shape.size(); ++d) {
    if (o.shape[d] > 1) dims.push_back({o.strides[d] < 0 ? -o.strides[d] : o.strides[d], o.shape[d]});
  }
  std::sort(dims.begin(), dims.end());
  __int128 extent = 0;
  for (const auto& d : dims) {
    if (d.first <= extent) return true;
    extent += static_cast<__int128>(d.first) * (d.second - 1);
  }
  return false;
}

// Ops that do not read src (the harness still makes one, to compute y):
// corrupting it, or placing an output over it, is not the library's concern.
bool src_unused(const OpDef& op) {
  static const std::set<std::string> names = {
      "sparsemax_backward", "entmax15_backward", "entmax_bisect_backward",
      "sparse_softmax_backward", "sigmoid_normalizer_backward", "probability_temperature",
      "probability_temperature_backward", "gumbel_softmax_backward"};
  return names.count(op.name) > 0;
}

// Corruptions that must be rejected, placement, fills and the model.
void finish_decode(Case& c, Reader& r) {
  std::vector<Operand*> present;
  for (Operand* o : c.operands()) {
    if (o->present) present.push_back(o);
  }
  const uint8_t cor = r.u8();
  if (cor >= 236 && !present.empty()) {
    Operand* victim = present[r.u8() % present.size()];
    switch (cor % 6) {
      case 0: {
        if (victim->shape.empty()) {
          victim->shape.push_back(2);
          victim->strides.push_back(1);
        }
        const size_t d = r.u8() % victim->shape.size();
        if (victim->shape[d] < 2) victim->shape[d] = 2;
        const int64_t huge[] = {INT64_MAX, INT64_MIN, INT64_MAX / 4 + 1, -(INT64_MAX / 4) - 2};
        victim->strides[d] = huge[r.u8() % 4];
        victim->unallocatable = true;
        break;
      }
      case 1: {
        if (victim->shape.empty()) {
          victim->shape.push_back(1);
          victim->strides.push_back(1);
        }
        victim->shape[r.u8() % victim->shape.size()] = -1;
        victim->unallocatable = true;
        break;
      }
      case 2: victim->rank_override = (r.u8() & 1) ? 9 : -1; break;
      case 3: victim->wrong_dtype = true; break;
      case 4: victim->null_data = true; break;
      default: break;
    }
  }
  // Placement: f32, i64, bool arenas, each view after the previous with guards.
  int64_t cursor[3] = {kGuard, kGuard, kGuard};
  for (Operand* o : present) {
    int64_t& cur = cursor[static_cast<int>(o->arena)];
    if (o->unallocatable || numel_of(o->shape) <= 0) {
      o->origin = cur;
      cur += 1 + kGuard;
      continue;
    }
    int64_t lo, hi;
    span_of(*o, &lo, &hi);
    o->origin = cur - lo;
    cur += hi - lo + 1 + kGuard;
  }
  // Exact aliasing or overlap of the f32 output. `allowed`: the inputs the
  // header lets the output be exactly (must work); exact aliasing with
  // another input is a grey zone (may be rejected; if accepted, must be
  // right); sharing elements otherwise must be rejected.
  std::vector<Operand*> allowed;
  const OpDef& op = *c.op;
  const std::string& nm = op.name;
  if (op.ext) {
    if (is_loss_backward(op)) {
      allowed = {&c.x};
    } else if (nm == "sigmoid_normalizer_backward") {
      allowed = {&c.y, &c.dy};
    } else if (nm == "probability_temperature_backward") {
      allowed = {&c.y, &c.dy};
    } else if (nm == "sparsemax_backward" || nm == "entmax15_backward" ||
               nm == "entmax_bisect_backward" || nm == "sparse_softmax_backward" ||
               nm == "ssmax_backward") {
      allowed = {&c.dy};
    } else if (op.ext->needs_dy) {
      allowed = {&c.dy, &c.x};
    } else if (op.ext->out_shape == smax_cli::OutShape::kSame && op.ext->forward) {
      allowed = {&c.y};
    } else if (op.ext->out_shape == smax_cli::OutShape::kSame) {
      allowed = {&c.x};
    }
  } else if (op.custom == Custom::kGumbelSoftmaxBackward) {
    allowed = {&c.dy};
  } else if (op.custom == Custom::kSamplingFilter) {
    allowed = {&c.x};
  }
  Operand* alias_to = nullptr;
  {
    const uint8_t ab = r.u8();
    std::vector<Operand*> any;
    for (Operand* o : present) {
      if (o->input && o->arena == Arena::kF32 && o->shape == c.out.shape) any.push_back(o);
    }
    if (!allowed.empty() && ab < 192) alias_to = allowed[ab % allowed.size()];
    else if (!any.empty()) alias_to = any[ab % any.size()];
  }
  const uint8_t pm = r.u8() % 16;
  if (c.out.present && !c.out.unallocatable && c.out.rank_override == -1000) {
    if (pm == 1 && alias_to && alias_to->present && !alias_to->unallocatable &&
        alias_to->shape == c.out.shape) {
      c.out.strides = alias_to->strides;
      c.out.origin = alias_to->origin;
      c.alias = true;
    } else if (pm == 2) {
      std::vector<Operand*> ins;
      for (Operand* o : present) {
        if (o->input && o->arena == Arena::kF32 && !o->unallocatable) ins.push_back(o);
      }
      if (!ins.empty()) c.out.origin = ins[r.u8() % ins.size()]->origin + static_cast<int8_t>(r.u8()) % 6;
    }
  }
  // Arena sizes (an output placed over an input may reach beyond it).
  for (int a = 0; a < 3; ++a) {
    int64_t min_at = kGuard, max_at = cursor[a];
    for (Operand* o : present) {
      if (static_cast<int>(o->arena) != a || o->unallocatable || numel_of(o->shape) <= 0) continue;
      int64_t lo, hi;
      span_of(*o, &lo, &hi);
      min_at = std::min(min_at, o->origin + lo);
      max_at = std::max(max_at, o->origin + hi + 1);
    }
    const int64_t shift = kGuard - min_at;
    for (Operand* o : present) {
      if (static_cast<int>(o->arena) == a) o->origin += shift;
    }
    const size_t size = static_cast<size_t>(max_at + shift + kGuard);
    if (a == 0) c.f32.assign(size, kSentinel);
    if (a == 1) c.i64.assign(size, kSentinelI64);
    if (a == 2) c.bytes.assign(size, kSentinelByte);
  }

  // The model.
  const bool has_options = op.custom != Custom::kGumbelNoise && op.custom != Custom::kSoftNms;
  if (has_options) {
    if (!c.axis_ok) reject(c, "axis out of range");
    const float s = c.opt.scale / c.opt.temperature;
    if (!(std::isfinite(c.opt.scale) && c.opt.scale > 0)) reject(c, "scale");
    if (!(std::isfinite(c.opt.temperature) && c.opt.temperature > 0)) reject(c, "temperature");
    if (!(std::isfinite(s) && s > 0)) reject(c, "scale/temperature");
    const int e = static_cast<int>(c.opt.empty_row);
    if (e < 0 || e > 1) reject(c, "empty_row value");
    if (c.opt.threads < 0) reject(c, "threads");
  } else if (op.custom == Custom::kGumbelNoise && !c.axis_ok) {
    reject(c, "axis out of range");
  }
  const bool skip_src = src_unused(op);
  for (Operand* o : present) {
    if (skip_src && o == &c.x) continue;
    if (o->rank_override != -1000) reject(c, std::string(o->name) + " rank");
    // cross_entropy(_backward) takes f32 targets as probabilities (src's shape).
    const bool prob_target = o == &c.target && o->wrong_dtype && o->arena == Arena::kI64 &&
                             o->shape == c.shape &&
                             (op.name == "cross_entropy" || op.name == "cross_entropy_backward");
    if (o->wrong_dtype && !prob_target) reject(c, std::string(o->name) + " dtype");
    for (int64_t v : o->shape) {
      if (v < 0) reject(c, std::string(o->name) + " negative size");
    }
    const int64_t n = numel_of(o->shape);
    if (n < 0) reject(c, std::string(o->name) + " element count overflow");
    if (n > 0 && o->null_data) reject(c, std::string(o->name) + " null data");
    if (n > 0 && bytes_overflow(*o, esize_of(*o))) reject(c, std::string(o->name) + " byte offsets overflow");
  }
  if (c.must_reject) return;
  for (Operand* m : {&c.add_mask, &c.bool_mask}) {
    if (m->present && op.custom != Custom::kLce && op.custom != Custom::kLceBackward &&
        op.custom != Custom::kLceFused && !broadcastable(m->shape, c.shape)) {
      reject(c, std::string(m->name) + " not broadcastable");
    }
  }
  if (c.weight.present && c.weight.shape != std::vector<int64_t>{c.n}) reject(c, "weight shape");
  if (c.prow.present && !broadcastable(c.prow.shape, c.keep_shape)) {
    reject(c, std::string(c.prow.name) + " not broadcastable");
  }
  for (Operand* o : {&c.dprow, &c.ce_lse, &c.ce_ent, &c.ce_tlp, &c.ce_z, &c.ce_acc}) {
    if (!o->present) continue;
    const bool reduced = (o == &c.ce_z || o == &c.ce_acc) && c.loss.reduction != smax::Reduction::kNone;
    if (reduced ? numel_of(o->shape) != 1 : (o->shape != c.rows_shape && o->shape != c.keep_shape)) {
      reject(c, std::string(o->name) + " shape");
    }
  }
  if (c.out.present && c.out.shape.size() == 1 && op.custom == Custom::kSoftNms && c.out.shape[0] != c.N) {
    reject(c, "kept_scores shape");
  }
  for (Operand* o : present) {
    if (o->input || numel_of(o->shape) <= 0) continue;
    if (has_duplicates(offsets_of(*o))) reject(c, std::string(o->name) + " writes one element twice");
    for (Operand* in : present) {
      if (!in->input || in->arena != o->arena) continue;
      if (skip_src && in == &c.x) continue;
      // Exact aliasing: allowed, or the grey zone (see above).
      const bool exact = o == &c.out && same_operand_view(*o, *in);
      if (!exact && shares_element(*o, *in)) {
        reject(c, std::string(o->name) + " shares an element with " + in->name);
      }
    }
    for (Operand* o2 : present) {
      if (o2 != o && !o2->input && shares_element(*o, *o2)) reject(c, "outputs overlap");
    }
  }
}

}  // namespace ops_internal
}  // namespace smax_fuzz
