// fuzz/harness_ops.cc: see harness_ops.h.
#include "harness_ops.h"
#include "operands.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "op_table.h"
#include "reference/bounds.h"
#include "reference/cross_entropy.h"
#include "reference/linear_cross_entropy.h"
#include "reference/reference.h"
#include "reference/rescaled.h"
#include "reference/reweight.h"
#include "reference/rows.h"
#include "reference/sampling.h"
#include "reference/sparse.h"
#include "smax/linear_cross_entropy.h"
#include "smax/smax.h"

namespace smax_fuzz {
namespace {

using smax::DType;
using smax::SoftmaxOptions;
using smax::TensorView;
namespace ref = smax::reference;
using Row = std::vector<double>;
using ref::dense_index;
using ref::vjp_row_overflows;

constexpr double kU = 0x1p-24;
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int64_t kGuard = 8;
constexpr int64_t kMaxElements = 2048;
const float kSentinel = -12345.678f;
constexpr int64_t kSentinelI64 = 0x5A5A5A5A5A5A5A5All;
constexpr uint8_t kSentinelByte = 0xA5;

GroupStats g_stats;

// ---- input decoding -----------------------------------------------------------------

// Logits: specials, denormals, huge, raw patterns, ties, ordinary values.
float logit(Reader& r) {
  const uint8_t k = r.u8();
  switch (k % 24) {
    case 0: return kNaN;
    case 1: return kInf;
    case 2:
    case 3: return -kInf;
    case 4: return bits_to_float((r.u32() & 0x807fffffu) | 1u);  // denormal
    case 5: {
      const float huge[] = {1e30f, -1e30f, FLT_MAX, -FLT_MAX, 1e38f, -3e38f, 8e37f, -1e20f};
      return huge[r.u8() % 8];
    }
    case 6: return bits_to_float(r.u32());
    case 7: return (k & 0x20) ? -0.0f : 0.0f;
    case 8: return 90.0f + static_cast<float>(r.u8()) / 25.6f;
    case 9: return static_cast<float>(static_cast<int16_t>(r.u16())) / 8.0f;
    case 10:
    case 11: return static_cast<float>(r.u8() % 4);  // ties
    case 12: return static_cast<float>(static_cast<int8_t>(r.u8())) / 1024.0f;  // near 0
    default: return static_cast<float>(static_cast<int8_t>(r.u8())) / 16.0f;
  }
}

// Upstream gradients: bounded (|dy| <= 2^15 * 1e3), rarely NaN / inf.
float gradient(Reader& r) {
  const uint8_t k = r.u8();
  switch (k % 32) {
    case 0: return kNaN;
    case 1: return (k & 0x20) ? kInf : -kInf;
    case 2: return bits_to_float((r.u32() & 0x807fffffu) | 1u);
    case 3: return static_cast<float>(static_cast<int16_t>(r.u16())) * 1000.0f;
    case 4: return 0.0f;
    default: return static_cast<float>(static_cast<int16_t>(r.u16())) / 4096.0f;
  }
}

float option_float(Reader& r) {
  const uint8_t k = r.u8();
  if (k < 200) return 1.0f;
  const float table[] = {0.5f, 2.0f, 1e-3f, 1e3f, 0.0f, -1.0f, kNaN, kInf,
                         3.0f, 0.125f, 1e-30f, 1e30f, 0.3f, -0.0f};
  return table[k % 14];
}

// ---- operands in arenas --------------------------------------------------------------

enum class Arena { kF32, kI64, kBool };

// An operand: its Layout (operands.h: shape, strides, origin in its arena),
// the arena it lives in and how the harness corrupts it.
struct Operand : Layout {
  const char* name = "";
  bool present = false;
  Arena arena = Arena::kF32;
  bool input = true;
  int rank_override = -1000;
  bool null_data = false;
  bool wrong_dtype = false;
  bool unallocatable = false;
};

std::vector<int64_t> make_strides(const std::vector<int64_t>& shape, Reader& r) {
  const size_t rank = shape.size();
  std::vector<int64_t> st = row_major(shape);
  switch (r.u8() % 12) {
    case 3: {  // permuted memory order, padded
      std::vector<size_t> order(rank);
      for (size_t i = 0; i < rank; ++i) order[i] = i;
      for (size_t i = rank; i > 1; --i) std::swap(order[i - 1], order[r.u8() % i]);
      const int64_t pad = r.u8() % 3;
      int64_t s = 1;
      for (size_t i = rank; i-- > 0;) {
        st[order[i]] = s;
        s *= std::max<int64_t>(shape[order[i]], 1) + (i + 1 < rank ? pad : 0);
      }
      break;
    }
    case 4: {  // negative strides on some dims
      const uint8_t m = r.u8();
      for (size_t d = 0; d < rank; ++d) {
        if (m & (1u << d)) st[d] = -st[d];
      }
      break;
    }
    case 5: {  // arbitrary small strides: zero, negative, overlapping
      for (size_t d = 0; d < rank; ++d) st[d] = static_cast<int8_t>(r.u8()) % 24;
      break;
    }
    case 6: {  // broadcast (zero) strides on some dims
      const uint8_t m = r.u8();
      for (size_t d = 0; d < rank; ++d) {
        if (m & (1u << d)) st[d] = 0;
      }
      break;
    }
    case 7: {
      const int64_t step = 2 + r.u8() % 2;
      for (auto& s : st) s *= step;
      break;
    }
    default: break;  // row-major
  }
  return st;
}

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

// ---- ops ---------------------------------------------------------------------------------

enum class Custom {
  kNone,
  kCollapse,
  kGumbelNoise,
  kGumbelSoftmaxBackward,
  kSamplingFilter,
  kSoftNms,
  kLce,
  kLceBackward,
  kLceFused,
};

// Options of table ops that the CLI table does not expose (group "options"):
// the op is called directly with them, and checked against the oracle with
// the same options.
enum class Variant {
  kNone,
  kAlphaTensor,  // entmax_bisect(_backward): per-row EntmaxBisectOptions::alpha_tensor (+ dalpha)
  kSRows,        // ssmax(_backward): per-row SsmaxOptions::s_rows (+ ds)
  kForceTarget,  // sparse_softmax_loss(_backward): SparseSoftmaxLossOptions::force_target
  kProbTargets,  // cross_entropy(_backward): f32 probability targets (+ the optional outputs)
  kCeOutputs,    // cross_entropy: z_loss, lse, entropy, target_logprob, accuracy outputs
};

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kNone: return "none";
    case Variant::kAlphaTensor: return "alpha_tensor";
    case Variant::kSRows: return "s_rows";
    case Variant::kForceTarget: return "force_target";
    case Variant::kProbTargets: return "probability_targets";
    case Variant::kCeOutputs: return "optional_outputs";
  }
  return "?";
}

struct OpDef {
  std::string name;                        // the public function (error message prefix)
  const smax_cli::ExtOp* ext = nullptr;    // table op, or nullptr
  Custom custom = Custom::kNone;
  Variant variant = Variant::kNone;
};

const std::vector<OpDef>& group_ops(Group g) {
  static const std::array<std::vector<OpDef>, 4> groups = [] {
    auto table = [](std::initializer_list<const char*> names) {
      std::vector<OpDef> v;
      for (const char* n : names) {
        const smax_cli::ExtOp* op = smax_cli::find_ext_op(n);
        if (!op) {
          std::fprintf(stderr, "smax fuzz: op %s missing from the CLI table\n", n);
          std::abort();
        }
        v.push_back({n, op, Custom::kNone});
      }
      return v;
    };
    // The three op groups are the ops of smax/op_list.inc's groups
    // normalizers, losses and sampling, in the list's order (the first input
    // byte picks one). Each op is driven through the CLI's table, or by the
    // harness's own code where the table has no generic form of it.
    static const std::map<std::string, Custom> kCustom = {
        {"softmax_collapse_fraction", Custom::kCollapse},
        {"linear_cross_entropy", Custom::kLce},
        {"linear_cross_entropy_backward", Custom::kLceBackward},
        {"linear_cross_entropy_fused", Custom::kLceFused},
        {"gumbel_noise", Custom::kGumbelNoise},
        {"gumbel_softmax_backward", Custom::kGumbelSoftmaxBackward},
        {"sampling_filter", Custom::kSamplingFilter},
        {"soft_nms", Custom::kSoftNms}};
    std::vector<OpDef> norm, loss, samp;
    for (const smax::OpInfo& info : smax::op_list()) {
      const std::string group = info.group;
      std::vector<OpDef>* into = group == "normalizers" ? &norm
                                 : group == "losses"    ? &loss
                                 : group == "sampling"  ? &samp
                                                        : nullptr;
      if (into == nullptr) continue;  // softmax family, attention: harnesses of their own
      const auto custom = kCustom.find(info.name);
      if (custom != kCustom.end()) {
        into->push_back({info.name, nullptr, custom->second});
      } else if (const smax_cli::ExtOp* op = smax_cli::find_ext_op(info.name)) {
        into->push_back({info.name, op, Custom::kNone});
      } else {
        std::fprintf(stderr,
                     "smax fuzz: op %s of smax/op_list.inc has no fuzz driver (not in the CLI "
                     "table, no custom code in fuzz/harness_ops.cc)\n",
                     info.name);
        std::abort();
      }
    }
    // The options the CLI table does not expose (a group of its own, so the
    // inputs of the three groups above decode as before).
    std::vector<OpDef> opts;
    auto add = [&](const char* n, Variant v) {
      std::vector<OpDef> one = table({n});
      one[0].variant = v;
      opts.push_back(one[0]);
    };
    add("entmax_bisect", Variant::kAlphaTensor);
    add("entmax_bisect_backward", Variant::kAlphaTensor);
    add("ssmax", Variant::kSRows);
    add("ssmax_backward", Variant::kSRows);
    add("sparse_softmax_loss", Variant::kForceTarget);
    add("sparse_softmax_loss_backward", Variant::kForceTarget);
    add("cross_entropy", Variant::kProbTargets);
    add("cross_entropy_backward", Variant::kProbTargets);
    add("cross_entropy", Variant::kCeOutputs);
    return std::array<std::vector<OpDef>, 4>{norm, loss, samp, opts};
  }();
  return groups[static_cast<int>(g)];
}

// Parameter values: valid ones and ones the contract rejects.
struct ParamChoice {
  std::vector<double> valid, invalid;
};
const ParamChoice& param_choices(const std::string& op, const std::string& p) {
  static const std::map<std::string, ParamChoice> by_name = {
      {"alpha", {{1.5, 2.0, 1.2, 1.01, 3.0, 1.0, 1.75, 1.5}, {0.5, NAN, INFINITY, 0.999}}},
      {"n_iter", {{50, 1, 5, 30, 50}, {0, -1}}},
      {"k", {{1, 2, 3, 10, 1000, 5}, {0, -1}}},
      {"s", {{0.43, 1, 0, -0.5, 3, 0.43}, {NAN, INFINITY}}},
      {"fixed_n", {{0, 1, 7, 512, 0}, {-1}}},
      {"eps", {{1e-6, 0, 1e-8, FLT_MIN, 1, 1e-6}, {-1, 1e-40, NAN, INFINITY}}},
      {"normalized", {{0, 1}, {}}},
      {"head_dim", {{64, 2, 1000, 64}, {1, 0, -1}}},
      {"power", {{1, 2, 0.5, 3, 1}, {0, -1, NAN, INFINITY}}},
      {"p", {{2, 4, 8, 2}, {1, 3, 0, -2}}},
      {"gamma", {{-0.025, 0, -0.1, -3, -1e-6, -0.025}, {0.1, NAN, INFINITY, -INFINITY}}},
      {"zeta", {{1, 1.5, 1.01, 10, 1}, {0.9, 0, NAN, INFINITY}}},
      {"T", {{2, 1, 0.5, 0.1, 10, 2}, {0, -1, NAN, INFINITY}}},
      {"label_smoothing", {{0, 0.1, 1, 0.5, 0}, {-0.1, 1.5, NAN}}},
      {"lse_square_scale", {{0, 1e-4, 1, 0}, {-1, INFINITY, NAN}}},
      {"softcap", {{0, 30, 1, 0.5, 0}, {-1, INFINITY, NAN}}},
      {"coefficient", {{1e-4, 0, 1, 1e-4}, {-1, NAN, INFINITY}}},
      {"a", {{1, 0.5, 10, 1}, {0, -1, NAN, INFINITY}}},
      {"b", {{1, 0, -2, 5}, {NAN, INFINITY}}},
      {"tau", {{1, 0.5, 2, 0.01, 1}, {0, -1, NAN, INFINITY}}},
      {"hard", {{0, 1}, {}}},
      {"seed", {{1, 0, 12345, 9007199254740992.0}, {}}},
      {"temperature", {{1, 0, 0.5, 2, 1}, {-1, NAN, INFINITY}}},
      {"top_k", {{50, 0, 1, 3, 0}, {-1}}},
      {"top_p", {{0.9, 1, 0.5, 0.01, 1}, {0, 1.5, -0.1, NAN}}},
  };
  static const ParamChoice topk_k = {{0, 1, 2, 3, 5}, {-1}};
  if (op == "softmax_topk" && p == "k") return topk_k;
  const auto it = by_name.find(p);
  if (it == by_name.end()) {
    std::fprintf(stderr, "smax fuzz: no value table for parameter %s of %s\n", p.c_str(), op.c_str());
    std::abort();
  }
  return it->second;
}

// ---- one case -----------------------------------------------------------------------------

struct Case {
  const OpDef* op = nullptr;
  std::string target_cap;
  std::vector<int64_t> shape;  // logical shape of src (rank >= 0)
  int rank = 0;
  int ax = 0;                  // resolved axis (valid or not)
  bool axis_ok = true;
  int64_t n = 0;               // classes / row length
  SoftmaxOptions opt;
  smax::LossOptions loss;
  std::map<std::string, double> params;
  // Custom-op parameters.
  smax::SoftNmsOptions nms;
  bool nms_vector_api = false;
  smax::LinearCrossEntropyOptions lce;
  bool lce_bias = false, lce_dbias = false;
  int64_t N = 0, D = 0, V = 0;
  int precision = 0;
  bool want_flags = false;
  // Operands (f32 arena unless noted).
  Operand x, y, dy, target, out, out_index, add_mask, bool_mask, weight;
  Operand hidden, lweight, bias, dhidden, dweight, dbias, dloss;
  // Variants: per-row parameter inputs, per-row gradient outputs (dalpha /
  // ds), cross_entropy's optional outputs.
  Operand prow, dprow, ce_z, ce_lse, ce_ent, ce_tlp, ce_acc;
  std::vector<int64_t> rows_shape, keep_shape;
  bool alias = false;
  bool raw_y = false;
  bool must_reject = false;
  std::string reject_reason;
  std::vector<float> f32;
  std::vector<int64_t> i64;
  std::vector<uint8_t> bytes;

  std::vector<Operand*> operands() {
    return {&x, &y, &dy, &target, &out, &out_index, &add_mask, &bool_mask, &weight,
            &hidden, &lweight, &bias, &dhidden, &dweight, &dbias, &dloss,
            &prow, &dprow, &ce_z, &ce_lse, &ce_ent, &ce_tlp, &ce_acc};
  }
};

void reject(Case& c, const std::string& why) {
  if (!c.must_reject) c.reject_reason = why;
  c.must_reject = true;
}

std::string describe(Case& c) {
  std::ostringstream os;
  os.precision(9);
  os << c.op->name;
  if (c.op->variant != Variant::kNone) os << " (" << variant_name(c.op->variant) << ")";
  os << " target=" << c.target_cap << " shape=[";
  for (size_t i = 0; i < c.shape.size(); ++i) os << (i ? "," : "") << c.shape[i];
  os << "] axis=" << c.opt.axis << " scale=" << c.opt.scale << " temperature=" << c.opt.temperature
     << " empty_row=" << static_cast<int>(c.opt.empty_row) << " threads=" << c.opt.threads
     << " alias=" << c.alias << " raw_y=" << c.raw_y
     << " reduction=" << static_cast<int>(c.loss.reduction)
     << " ignore_index=" << c.loss.ignore_index << " empty_mean=" << static_cast<int>(c.loss.empty_mean);
  for (const auto& p : c.params) os << " " << p.first << "=" << p.second;
  if (c.op->custom == Custom::kSoftNms) {
    os << " method=" << static_cast<int>(c.nms.method) << " sigma=" << c.nms.sigma
       << " iou=" << c.nms.iou_threshold << " score_thr=" << c.nms.score_threshold
       << " plus_one=" << c.nms.plus_one << " vector_api=" << c.nms_vector_api;
  }
  if (c.op->custom == Custom::kLce || c.op->custom == Custom::kLceBackward ||
      c.op->custom == Custom::kLceFused) {
    os << " N=" << c.N << " D=" << c.D << " V=" << c.V << " token_chunk=" << c.lce.token_chunk
       << " vocab_chunk=" << c.lce.vocab_chunk;
  }
  for (Operand* o : c.operands()) {
    if (!o->present) continue;
    os << "\n  " << o->name << ": shape [";
    for (size_t i = 0; i < o->shape.size(); ++i) os << (i ? "," : "") << o->shape[i];
    os << "] strides [";
    for (size_t i = 0; i < o->strides.size(); ++i) os << (i ? "," : "") << o->strides[i];
    os << "] origin " << o->origin;
    if (o->rank_override != -1000) os << " rank=" << o->rank_override;
    if (o->null_data) os << " null";
    if (o->wrong_dtype) os << " wrong-dtype";
    // Values of small operands.
    if (!o->unallocatable && !o->null_data && o->rank_override == -1000 &&
        numel_of(o->shape) > 0 && numel_of(o->shape) <= (std::getenv("SMAX_FUZZ_VERBOSE") ? 4096 : 48)) {
      os << " values {";
      bool first = true;
      for (int64_t off : offsets_of(*o)) {
        const size_t at = static_cast<size_t>(o->origin + off);
        os << (first ? "" : ", ");
        first = false;
        if (o->arena == Arena::kF32) os << c.f32[at];
        else if (o->arena == Arena::kI64) os << c.i64[at];
        else os << static_cast<int>(c.bytes[at]);
      }
      os << "}";
    }
  }
  if (c.must_reject) os << "\n  must reject: " << c.reject_reason;
  return os.str();
}

[[noreturn]] void violation(Case& c, const std::string& what) {
  std::fprintf(stderr, "\nsmax fuzz VIOLATION: %s\n  case: %s\n", what.c_str(), describe(c).c_str());
  std::fflush(stderr);
  std::abort();
}

TensorView view_of(Case& c, const Operand& o) {
  TensorView v;
  v.dtype = o.arena == Arena::kBool ? DType::kBool : o.arena == Arena::kI64 ? DType::kI64 : DType::kF32;
  if (o.wrong_dtype) v.dtype = v.dtype == DType::kF32 ? DType::kI64 : DType::kF32;
  v.rank = static_cast<int>(o.shape.size());
  for (size_t d = 0; d < o.shape.size() && d < 8; ++d) {
    v.shape[d] = o.shape[d];
    v.strides[d] = o.strides[d];
  }
  if (o.rank_override != -1000) v.rank = o.rank_override;
  if (o.null_data) {
    v.data = nullptr;
  } else if (o.arena == Arena::kBool) {
    v.data = c.bytes.data() + o.origin;
  } else if (o.arena == Arena::kI64) {
    v.data = c.i64.data() + o.origin;
  } else {
    v.data = c.f32.data() + o.origin;
  }
  return v;
}

bool is_loss_backward(const OpDef& op) {
  return op.ext && op.ext->out_shape == smax_cli::OutShape::kLoss && op.ext->needs_dy;
}

// ---- decoding a case --------------------------------------------------------------------------

void set_operand(Operand& o, const char* name, std::vector<int64_t> shape, Arena a, bool input,
                 Reader& r) {
  o.name = name;
  o.present = true;
  o.arena = a;
  o.input = input;
  o.shape = std::move(shape);
  o.strides = make_strides(o.shape, r);
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
    for (const char* p : {"temperature", "top_k", "top_p", "seed"}) {
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
    m->strides = make_strides(m->shape, r);
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

// ---- fills ---------------------------------------------------------------------------

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

smax_cli::ExtCall ext_call(Case& c);
SoftmaxOptions full_options(Case& c);
smax::EntmaxBisectOptions bisect_options(Case& c);
smax::SsmaxOptions ssmax_options(Case& c);

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

// ---- the variants' options (group "options") ---------------------------------------------

smax::EntmaxBisectOptions bisect_options(Case& c) {
  smax::EntmaxBisectOptions b;
  b.alpha = static_cast<float>(c.params["alpha"]);
  b.n_iter = static_cast<int>(c.params["n_iter"]);
  if (c.prow.present) b.alpha_tensor = view_of(c, c.prow);
  return b;
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

// ---- calling the library ---------------------------------------------------------------------

// Custom-op results that are not in the arenas.
struct Extra {
  double collapse = 0.0;
  smax::SoftNmsResult nms;
  int64_t nms_count = 0;
};

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
      smax::SampleOptions so;
      so.temperature = static_cast<float>(k.params["temperature"]);
      so.top_k = static_cast<int64_t>(k.params["top_k"]);
      so.top_p = static_cast<float>(k.params["top_p"]);
      so.seed = static_cast<uint64_t>(k.params["seed"]);
      smax::sampling_filter(view_of(k, k.x), view_of(k, k.out), so, opt);
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
  *ok = false;
  try {
    invoke(c, opt, extra);
  } catch (const smax::Error& e) {
    const std::string msg = e.what();
    if (e.status() != smax::Status::kInvalidArgument) {
      violation(c, std::string("smax::Error with status ") + smax::status_name(e.status()) + ": " + msg);
    }
    if (!message_names_op(c.op->name, msg)) violation(c, "error message does not name the op: " + msg);
    return msg;
  } catch (const std::exception& e) {
    violation(c, std::string("a non-smax exception escaped: ") + e.what());
  } catch (...) {
    violation(c, "an unknown exception escaped");
  }
  *ok = true;
  return "";
}

// ---- the reference and the bounds --------------------------------------------------------

struct Expect {
  std::vector<double> ref;      // dense f32 output (may be empty)
  std::vector<double> bound;    // per element
  std::vector<char> exact_zero; // per element: 0 required exactly
  std::vector<int64_t> ref_index;  // dense i64 output
  std::vector<char> index_free;    // per element of the index output: not compared
  double dot_gap_bound_extra = 0;  // not used per element (see dot_gap)
  std::vector<double> dot_gap;     // per element: documented softmax_backward dot gap
  // Per element: +-inf / NaN accepted because an f32 intermediate of the
  // softmax-style VJP row overflows (vjp_row_overflows; only a y far
  // outside [0, 1] reaches it), see docs/reliability.md.
  std::vector<char> overflow_ok;
  // Per element: value not compared (a row whose upstream gradient dy holds
  // +-inf / NaN, see unchecked_rows); filled before the call (dy may be
  // overwritten in place).
  std::vector<char> unchecked;
  std::vector<char> unchecked_row;  // the same per row (per-row outputs: dalpha, ds)
  // Extra outputs (LCE backward).
  std::vector<double> ref2, bound2, ref3, bound3, ref4, bound4;
  // soft_nms.
  smax::SoftNmsResult nms;
  std::vector<int> flags;
  // Optional outputs of the variants (dalpha, ds, cross_entropy's extras).
  struct Out {
    const Operand* o;
    std::vector<double> ref, bound;
  };
  std::vector<Out> extras;
};

Row row_of(const ref::RefRows& R, int64_t r) { return Row(R.row(r), R.row(r) + R.n); }

// The call as the bounds see it (src/reference/bounds.h).
ref::BoundCall bound_call(Case& c, const smax_cli::ExtCall& e) {
  ref::BoundCall b;
  b.x = e.x;
  b.y = e.y;
  b.dy = e.dy;
  b.target = e.target;
  b.options = e.options;
  b.loss = e.loss;
  b.params = c.params;
  if (c.prow.present) b.row_param = view_of(c, c.prow);
  b.force_target = c.op->variant == Variant::kForceTarget;
  return b;
}

// Bounds for the table ops (documented in each op's header; src/reference/bounds.h).
void table_bounds(Case& c, Expect& ex, smax_cli::ExtCall& e) {
  ref::ElementBounds b = ref::op_bounds(c.op->name, bound_call(c, e), ex.ref);
  ex.bound = std::move(b.bound);
  ex.exact_zero = std::move(b.exact_zero);
  ex.dot_gap = std::move(b.dot_gap);
  ex.overflow_ok = std::move(b.overflow_ok);
}

// ---- checking -------------------------------------------------------------------------------

struct Check {
  std::string first;
  long long failures = 0;
  void fail(size_t i, double out, double refv, double bound, const char* what) {
    if (failures++ == 0) {
      std::ostringstream os;
      os.precision(10);
      os << "element " << i << ": out=" << out << " ref=" << refv << " bound=" << bound << " " << what;
      first = os.str();
    }
  }
};

void check_values(Check& ck, const std::vector<double>& out, const std::vector<double>& refv,
                  const std::vector<double>& bound, const std::vector<char>* exact_zero,
                  const std::vector<double>* gap, const char* what,
                  const std::vector<char>* overflow_ok = nullptr) {
  for (size_t i = 0; i < refv.size() && i < out.size(); ++i) {
    const double o = out[i], r = refv[i], b = bound[i];
    const bool ovf = overflow_ok && i < overflow_ok->size() && (*overflow_ok)[i];
    if (ovf && !std::isfinite(o)) continue;  // f32 intermediate overflow (see vjp_row_overflows)
    if (std::isnan(r) || std::isnan(o)) {
      if (std::isnan(r) != std::isnan(o)) ck.fail(i, o, r, b, "(NaN mismatch)");
      continue;
    }
    if (std::isinf(r)) {
      if (o != r) ck.fail(i, o, r, b, "(inf mismatch)");
      continue;
    }
    if (std::isinf(o)) {
      // inf is within the documented bound when ref +- bound reaches beyond
      // f32 on that side (e.g. self_adjust_softmax_backward at temperature
      // 1e-30: bound 4e53 around an exact 0).
      const bool bound_reaches = o > 0 ? r + b >= 0x1p128 : r - b <= -0x1p128;
      if (static_cast<double>(static_cast<float>(r)) != o && !bound_reaches) {
        ck.fail(i, o, r, b, "(unexpected inf)");
      }
      continue;
    }
    if (exact_zero && (*exact_zero)[i] && r == 0.0) {
      if (o != 0.0) ck.fail(i, o, r, 0.0, "(exact 0 required)");
      continue;
    }
    // Values whose f32 rounding is exact pass (bounds of 0: exact outputs).
    if (static_cast<double>(static_cast<float>(r)) == o) continue;
    if (std::fabs(o - r) <= b) continue;
    if (gap && std::fabs(o - r) <= b + (*gap)[i]) {
      ++g_stats.known_dot_gap;
      continue;
    }
    ck.fail(i, o, r, b, what);
  }
  if (out.size() != refv.size()) ck.fail(0, out.size(), refv.size(), 0, "(sizes differ)");
}

std::vector<double> dense_f32(Case& c, const Operand& o) { return ref::to_dense(view_of(c, o)); }
std::vector<int64_t> dense_i64(Case& c, const Operand& o) {
  std::vector<int64_t> v;
  for (int64_t off : offsets_of(o)) v.push_back(c.i64[static_cast<size_t>(o.origin + off)]);
  return v;
}

// LCE: bounds of include/smax/linear_cross_entropy.h.
void lce_expect(Case& c, Expect& ex) {
  const smax::CrossEntropyOptions ce = lce_ce(c);
  std::optional<TensorView> bias;
  if (c.bias.present) bias = view_of(c, c.bias);
  const SoftmaxOptions o = full_options(c);
  const ref::LceProblem P = ref::lce_problem(view_of(c, c.hidden), view_of(c, c.lweight),
                                             view_of(c, c.target), bias, ce, o);
  std::vector<double> dl;
  if (c.dloss.present) dl = dense_f32(c, c.dloss);
  const ref::LceResult res = ref::lce_solve(P, c.dloss.present ? &dl : nullptr);
  const int64_t N = P.N, V = P.V, D = P.D;
  const double a = P.a, zs = P.zs, s = P.s;
  double W = 0.0;
  for (int64_t j = 0; j < V; ++j) W += P.class_w.empty() ? 1.0 : std::fabs(P.class_w[static_cast<size_t>(j)]);
  auto cw = [&](int64_t j) { return P.class_w.empty() ? 1.0 : P.class_w[static_cast<size_t>(j)]; };
  std::vector<double> E(static_cast<size_t>(N), 0.0), rowb(static_cast<size_t>(N), 0.0);
  double den = 0.0;
  for (int64_t r = 0; r < N; ++r) {
    double mx = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      double acc = P.b.empty() ? 0.0 : std::fabs(P.b[static_cast<size_t>(j)]);
      if (!std::isfinite(acc)) acc = 0.0;
      for (int64_t k = 0; k < D; ++k) {
        acc += std::fabs(P.h[static_cast<size_t>(r * D + k)]) * std::fabs(P.w[static_cast<size_t>(j * D + k)]);
      }
      mx = std::max(mx, acc);
    }
    E[static_cast<size_t>(r)] = s * static_cast<double>(D + 3) * kU * mx;
    const int64_t y = P.target[static_cast<size_t>(r)];
    if (y == P.ignore_index) continue;
    const double wy = cw(y);
    den += wy;
    const double L = res.lse[static_cast<size_t>(r)];
    const double* t = &res.logits[static_cast<size_t>(r * V)];
    double Lf = std::isfinite(L) ? std::fabs(L) : 0.0;
    double M = (1.0 - a) * std::fabs(wy) * (1.0 + Lf + (std::isfinite(t[y]) ? std::fabs(t[y]) : 0.0));
    double sm = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      if (t[j] == -kInfD || !std::isfinite(t[j])) continue;
      sm += std::fabs(cw(j)) * (1.0 + Lf + std::fabs(t[j]));
    }
    M += a / static_cast<double>(V) * sm + 2.0 * zs * std::fabs(wy) * (1.0 + Lf) * Lf;
    rowb[static_cast<size_t>(r)] = 4e-6 * M + 2.0 * E[static_cast<size_t>(r)] *
                                                  (std::fabs(wy) * (1.0 + 2.0 * zs * Lf) + a * W / static_cast<double>(V)) + 1e-30;
  }
  if (c.out.present) {
    if (c.loss.reduction == smax::Reduction::kNone) {
      ex.ref = res.row_loss;
      ex.bound = rowb;
    } else {
      ex.ref = {res.loss};
      double sb = 0.0;
      for (double b : rowb) sb += b;
      if (c.loss.reduction == smax::Reduction::kMean) sb /= res.row_loss.empty() ? 1.0 : den;
      ex.bound = {sb + 0x1p-23 * (std::isfinite(res.loss) ? std::fabs(res.loss) : 0.0) + 1e-30};
    }
    ex.exact_zero.assign(ex.ref.size(), 0);
  }
  if (!c.dloss.present) return;
  // dz bounds e_rj (cap' <= 1).
  std::vector<double> e(static_cast<size_t>(N * V), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t y = P.target[static_cast<size_t>(r)];
    if (y == P.ignore_index) continue;
    const double G = std::fabs(res.G[static_cast<size_t>(r)]);
    const double L = res.lse[static_cast<size_t>(r)];
    const double* t = &res.logits[static_cast<size_t>(r * V)];
    const double wy = cw(y);
    double WU = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      if (t[j] != -kInfD) WU += cw(j);
    }
    const double A = std::fabs((1.0 - a) * wy + a / static_cast<double>(V) * WU + 2.0 * zs * wy * (std::isfinite(L) ? L : 0.0));
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::isfinite(L) && std::isfinite(t[j]) ? std::exp(t[j] - L) : 0.0;
      const double B = std::fabs((1.0 - a) * wy * (j == y ? 1.0 : 0.0) + a / static_cast<double>(V) * cw(j));
      // 0 * E_r is 0 even where E_r is inf (a row of non-finite hidden
      // values: p = 0 there), not NaN, which would fail every comparison.
      auto times_e = [&](double x) { return x == 0.0 ? 0.0 : x * E[static_cast<size_t>(r)]; };
      double b = 4e-6 * s * G * (p * A + B) + times_e(2.5 * s * G * p * (A + 2.0 * zs * std::fabs(wy)));
      if (P.cap > 0) b += times_e(s * G * (p * A + B)) / P.cap;
      e[static_cast<size_t>(r * V + j)] = b + 1e-30;
    }
  }
  ex.ref2 = res.dhidden;
  ex.bound2.assign(static_cast<size_t>(N * D), 1e-30);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t k = 0; k < D; ++k) {
      double b = 0.0;
      for (int64_t j = 0; j < V; ++j) {
        const double dz = res.dz[static_cast<size_t>(r * V + j)];
        b += (e[static_cast<size_t>(r * V + j)] + (V + 2) * kU * (std::isfinite(dz) ? std::fabs(dz) : 0.0)) *
             std::fabs(P.w[static_cast<size_t>(j * D + k)]);
      }
      ex.bound2[static_cast<size_t>(r * D + k)] += b;
    }
  }
  ex.ref3 = res.dweight;
  ex.bound3.assign(static_cast<size_t>(V * D), 1e-30);
  for (int64_t j = 0; j < V; ++j) {
    for (int64_t k = 0; k < D; ++k) {
      double b = 0.0;
      for (int64_t r = 0; r < N; ++r) {
        const double dz = res.dz[static_cast<size_t>(r * V + j)];
        b += (e[static_cast<size_t>(r * V + j)] + (N + 2) * kU * (std::isfinite(dz) ? std::fabs(dz) : 0.0)) *
             std::fabs(P.h[static_cast<size_t>(r * D + k)]);
      }
      ex.bound3[static_cast<size_t>(j * D + k)] += b;
    }
  }
  ex.ref4 = res.dbias;
  ex.bound4.assign(static_cast<size_t>(V), 1e-30);
  for (int64_t j = 0; j < V; ++j) {
    for (int64_t r = 0; r < N; ++r) {
      const double dz = res.dz[static_cast<size_t>(r * V + j)];
      ex.bound4[static_cast<size_t>(j)] += e[static_cast<size_t>(r * V + j)] + 2 * kU * (std::isfinite(dz) ? std::fabs(dz) : 0.0);
    }
  }
}

// sigmoid_normalizer_backward and gumbel_softmax_backward from a saved y:
// their headers zero the entries masked by the options' masks, and compute
// every other entry from y as given. The table / reference oracles take y's
// -inf entries as masked too (right for any y the forward produces, which is
// never -inf); the harness also feeds raw y, so it uses this oracle, which
// takes the masked set from the masks (reference::ref_masked).
std::vector<double> from_y_backward(const char* fn, const TensorView& y, const TensorView& dy,
                                    const SoftmaxOptions& o, bool gumbel, float tau) {
  const ref::RefRows Y = ref::ref_rows(fn, y, o, false);
  const ref::RefRows G = ref::ref_rows(fn, dy, o, false);
  const std::vector<char> masked = ref::ref_masked(fn, y, o);
  const double cg = static_cast<float>(static_cast<float>(Y.scale) / tau);
  std::vector<double> out(static_cast<size_t>(Y.rows * Y.n), 0.0);
  for (int64_t r = 0; r < Y.rows; ++r) {
    double dot = 0.0;
    for (int64_t i = 0; i < Y.n; ++i) dot += Y.row(r)[i] * G.row(r)[i];
    for (int64_t i = 0; i < Y.n; ++i) {
      const size_t at = static_cast<size_t>(r * Y.n + i);
      if (masked[at]) continue;
      const double v = Y.row(r)[i], g = G.row(r)[i];
      out[at] = gumbel ? cg * v * (g - dot) : Y.scale * g * v * (1.0 - v);
    }
  }
  return Y.scatter(out);
}

// Backward passes that zero every entry masked by the options' masks,
// whatever the row holds (Rowwise::zero_masked_outputs; "masks win over NaN
// in a backward pass", src/reference/rows.h): NaN rows and all-masked
// empty_row = kNan rows included. Returns the view whose masks count (the
// op's row input), or nullptr for other ops.
const TensorView* masks_zero_gradient(Case& c, const smax_cli::ExtCall& e) {
  static const std::set<std::string> from_src = {"ssmax_backward", "softpick_backward",
                                                 "clipped_softmax_backward",
                                                 "stablemax_backward",
                                                 "stablemax_cross_entropy_backward"};
  static const std::set<std::string> from_y = {"sparsemax_backward", "entmax15_backward",
                                               "entmax_bisect_backward",
                                               "sparse_softmax_backward",
                                               "sigmoid_normalizer_backward"};
  if (from_src.count(c.op->name)) return &e.x;
  if (from_y.count(c.op->name)) return &e.y;
  return nullptr;
}

void zero_masked_expect(Case& c, Expect& ex, const TensorView& v, const SoftmaxOptions& o) {
  const ref::RefRows R = ref::ref_rows("fuzz", v, o, false);
  const std::vector<char> masked = ref::ref_masked("fuzz", v, o);
  for (int64_t r = 0; r < R.rows; ++r) {
    for (int64_t k = 0; k < R.n; ++k) {
      if (!masked[static_cast<size_t>(r * R.n + k)]) continue;
      const size_t i = static_cast<size_t>(dense_index(R, r, k));
      if (i >= ex.ref.size()) continue;
      ex.ref[i] = 0.0;
      if (i < ex.exact_zero.size()) ex.exact_zero[i] = 1;
    }
  }
}

// cross_entropy_backward / z_loss_backward: "a masked class, or any class
// whose logit is -inf, ... gets exactly 0 gradient" (smax/cross_entropy.h),
// NaN rows and a NaN / inf dloss included; only an all-masked (or empty) row
// with empty_row = kNan is NaN everywhere. The oracles multiply a NaN / inf
// G by p_j = 0 there (NaN).
// The logits as cross_entropy forms them: with softcap and an additive
// mask, t = softcap tanh(u / softcap) + mask with u = x s under the bool
// mask (-inf where hidden, and the bool mask wins over the mask's value),
// not fl(x s + mask) (which overflows to -inf where the capped sum does
// not: fuzz/regressions/options/cross_entropy_backward_prob_targets_softcap_nan_row_vs_0).
std::vector<double> ce_logit_rows(Case& c, const smax_cli::ExtCall& e, const ref::RefRows& R) {
  const double cap = c.params.count("softcap") ? static_cast<float>(c.params["softcap"]) : 0.0;
  if (!(cap > 0.0) || !e.options.additive_mask) return R.values;
  return ref::cross_entropy_logits("fuzz", e.x, cap, e.options).values;
}

void zero_neg_inf_logits(Case& c, Expect& ex, const smax_cli::ExtCall& e) {
  const ref::RefRows R = ref::ref_rows("fuzz", e.x, e.options, true);
  const std::vector<double> T = ce_logit_rows(c, e, R);
  for (int64_t r = 0; r < R.rows; ++r) {
    bool all = true;
    for (int64_t k = 0; k < R.n; ++k) all &= T[static_cast<size_t>(r * R.n + k)] == -kInfD;
    if (all && e.options.empty_row == smax::EmptyRow::kNan) continue;
    for (int64_t k = 0; k < R.n; ++k) {
      if (T[static_cast<size_t>(r * R.n + k)] != -kInfD) continue;
      const size_t i = static_cast<size_t>(dense_index(R, r, k));
      if (i >= ex.ref.size()) continue;
      ex.ref[i] = 0.0;
      if (i < ex.exact_zero.size()) ex.exact_zero[i] = 1;
    }
  }
}

// The optional outputs of the variants, with the bounds of their headers
// (as tests/test_sparse.cc, test_rescaled.cc, test_cross_entropy.cc check
// them).
void variant_extras(Case& c, Expect& ex, const smax_cli::ExtCall& e) {
  const OpDef& op = *c.op;
  const SoftmaxOptions& o = e.options;
  if (op.variant == Variant::kAlphaTensor && c.dprow.present) {
    // dalpha: 1e-6 (1 + |ref|) + 4e-16 (n + 16) M (include/smax/sparse.h):
    // M = sum_i |g_i| (y_i + p~_i) / (alpha-1)^2 + |g_i| (|S_i| + p~_i |H|) / |alpha-1|,
    // the magnitude of the formula's terms, which cancel (e.g. uniform y).
    const smax::EntmaxBisectOptions b = bisect_options(c);
    std::vector<double> da;
    ref::entmax_backward(e.y, e.dy, 0.0, o, &b, &da);
    Expect::Out out{&c.dprow, da, {}};
    const ref::RefRows Y = ref::ref_rows("fuzz", e.y, o, false);
    const ref::RefRows G = ref::ref_rows("fuzz", e.dy, o, false);
    const std::vector<double> alphas =
        b.alpha_tensor ? ref::ref_row_values("fuzz", *b.alpha_tensor, Y)
                       : std::vector<double>(static_cast<size_t>(Y.rows), static_cast<double>(b.alpha));
    for (size_t r = 0; r < da.size(); ++r) {
      const double v = da[r];
      double bound = 1e-6 * (1.0 + (std::isfinite(v) ? std::fabs(v) : 0.0));
      if (static_cast<int64_t>(r) < Y.rows && r < alphas.size()) {
        const double am1 = std::fabs(alphas[r] - 1.0);
        const Row y = row_of(Y, static_cast<int64_t>(r)), g = row_of(G, static_cast<int64_t>(r));
        double sw = 0.0, H = 0.0;
        for (double yi : y) {
          if (yi > 0.0) {
            sw += std::pow(yi, 2.0 - alphas[r]);
            H += yi * std::log(yi);
          }
        }
        double M = 0.0;
        for (size_t i = 0; i < y.size() && sw > 0.0 && am1 > 0.0; ++i) {
          if (!(y[i] > 0.0)) continue;
          const double pt = std::pow(y[i], 2.0 - alphas[r]) / sw;
          M += std::fabs(g[i]) * ((y[i] + pt) / (am1 * am1) +
                                  (std::fabs(y[i] * std::log(y[i])) + pt * std::fabs(H)) / am1);
        }
        if (std::isfinite(M)) bound += 4e-16 * (static_cast<double>(y.size()) + 16.0) * M;
      }
      out.bound.push_back(bound);
    }
    ex.extras.push_back(out);
  }
  if (op.variant == Variant::kSRows && c.dprow.present) {
    // ds: 2e-6 ln n sum_i |t_i y_i| (|dy_i| + |<dy, y>|) + 1e-30 (include/smax/rescaled.h;
    // ref::ssmax_ds_bound).
    std::vector<double> ds;
    const smax::SsmaxOptions so = ssmax_options(c);
    ref::ssmax_backward(e.x, e.y, e.dy, so, o, &ds);
    const ref::RefRows T = ref::ref_rows("fuzz", e.x, o, true);
    const ref::RefRows Y = ref::ref_rows("fuzz", e.y, o, false);
    const ref::RefRows G = ref::ref_rows("fuzz", e.dy, o, false);
    Expect::Out out{&c.dprow, ds, std::vector<double>(ds.size(), 1e-30)};
    for (int64_t r = 0; r < T.rows && static_cast<size_t>(r) < ds.size(); ++r) {
      const Row t = row_of(T, r), y = row_of(Y, r), g = row_of(G, r);
      // + the dot term (smax/rescaled.h): every t_i y_i (g_i - dot) shares
      // the dot's error, 1.02e-6 sum_j |dy_j y_j| where <dy, y> cancels.
      double dot_term = 0.0;
      out.bound[static_cast<size_t>(r)] = ref::ssmax_ds_bound(t, y, g, ref::ssmax_n(t, so.fixed_n), &dot_term);
      out.bound[static_cast<size_t>(r)] += dot_term;
      if (vjp_row_overflows(y.data(), g.data(), static_cast<int64_t>(y.size()))) {  // f32 overflow
        ex.unchecked_row.resize(static_cast<size_t>(T.rows), 0);
        ex.unchecked_row[static_cast<size_t>(r)] = 1;
      }
    }
    ex.extras.push_back(out);
  }
  if (op.variant == Variant::kProbTargets || op.variant == Variant::kCeOutputs) {
    if (op.ext->needs_dy) return;
    const ref::CrossEntropyRef R = ref::cross_entropy(e.x, e.target, ce_options(c, e.loss, false), o);
    const ref::LossRef& L = R.loss;
    const bool reduced = c.loss.reduction != smax::Reduction::kNone;
    // Reduced like the loss: value, and 4e-6 (the same reduction of the
    // magnitudes) + 2^-23 |value| + 1e-30 (tests/test_cross_entropy.cc).
    auto reduce = [&](const std::vector<double>& v, const std::vector<double>& mag, double eps,
                      double den, Expect::Out& out) {
      const double want = L.reduce_with(v, den);
      std::vector<double> am(mag.size());
      for (size_t i = 0; i < mag.size(); ++i) am[i] = std::fabs(mag[i]);
      double bound = eps * std::fabs(L.reduce_with(am, den)) + std::ldexp(std::fabs(want), -23) + 1e-30;
      if (std::isnan(bound)) bound = 0.0;
      out.ref = {want};
      out.bound = {bound};
    };
    auto per_row = [&](const std::vector<double>& v, const std::vector<double>& mag, double eps,
                       Expect::Out& out) {
      out.ref = v;
      for (double m : mag) out.bound.push_back(eps * m + 1e-30);
    };
    if (c.ce_z.present) {
      std::vector<double> zmag(R.z.size());
      for (size_t i = 0; i < zmag.size(); ++i) {
        const double Li = std::fabs(R.lse[i]);
        zmag[i] = std::isfinite(R.z[i]) && std::isfinite(Li) && Li > 0 ? std::fabs(R.z[i]) * (1.0 + Li) / Li : 0.0;
      }
      Expect::Out out{&c.ce_z, {}, {}};
      if (reduced) reduce(R.z, zmag, 4e-6, L.denominator, out);
      else per_row(R.z, zmag, 4e-6, out);
      ex.extras.push_back(out);
    }
    if (c.ce_acc.present) {
      Expect::Out out{&c.ce_acc, {}, {}};
      const std::vector<double> zero(R.accuracy.size(), 0.0);
      double count = 0.0;
      for (char a : L.active) count += a;
      if (reduced) reduce(R.accuracy, zero, 0.0, count, out);
      else per_row(R.accuracy, zero, 0.0, out);
      ex.extras.push_back(out);
    }
    if (c.ce_lse.present) {
      Expect::Out out{&c.ce_lse, {}, {}};
      per_row(R.lse, R.lse_mag, 2e-6, out);
      ex.extras.push_back(out);
    }
    if (c.ce_ent.present) {
      Expect::Out out{&c.ce_ent, {}, {}};
      per_row(R.entropy, R.entropy_mag, 4e-6, out);
      ex.extras.push_back(out);
    }
    if (c.ce_tlp.present) {
      Expect::Out out{&c.ce_tlp, {}, {}};
      per_row(R.target_logprob, R.target_logprob_mag, 2e-6, out);
      ex.extras.push_back(out);
    }
  }
}

// The expected result of a valid call (before the call: in-place calls
// overwrite inputs).
Expect expect_of(Case& c) {
  Expect ex;
  const OpDef& op = *c.op;
  if (op.ext) {
    smax_cli::ExtCall e = ext_call(c);
    if (op.ext->check_indices || op.name == "softmax_topk") {
      if (op.name == "gumbel_max") {
        ex.ref_index = ref::gumbel_max(e.x, static_cast<uint64_t>(c.params["seed"]), e.options);
      } else if (op.name == "sample") {
        smax::SampleOptions so;
        so.temperature = static_cast<float>(c.params["temperature"]);
        so.top_k = static_cast<int64_t>(c.params["top_k"]);
        so.top_p = static_cast<float>(c.params["top_p"]);
        so.seed = static_cast<uint64_t>(c.params["seed"]);
        ex.ref_index = ref::sample(e.x, so, e.options);
        const ref::FilterRef f = ref::sampling_filter(e.x, so, e.options);
        ex.index_free.assign(ex.ref_index.size(), 0);
        for (size_t r = 0; r < f.fragile.size() && r < ex.index_free.size(); ++r) ex.index_free[r] = f.fragile[r];
      } else {
        smax::SoftmaxTopkOptions t;
        t.k = static_cast<int64_t>(c.params["k"]);
        const ref::TopkRef tr = ref::softmax_topk(e.x, t, e.options);
        ex.ref_index = tr.indices;
        ex.ref = tr.probs;
      }
    } else if (op.name == "sparse_softmax_backward" ||
               (op.name == "entmax_bisect_backward" && static_cast<float>(c.params["alpha"]) == 1.0f)) {
      // Documented as softmax_backward, dx = s y (dy - <dy, y>), for any y
      // (the table's entmax oracle divides by sum y instead, which agrees
      // only when y sums to 1); masked entries get exact 0
      // (masks_zero_gradient below).
      ex.ref = ref::softmax_backward(e.y, e.dy, e.options);
    } else if (op.name == "sigmoid_normalizer_backward") {
      ex.ref = from_y_backward("sigmoid_normalizer_backward", e.y, e.dy, e.options, false, 1.0f);
    } else {
      ex.ref = reference_of(c, e);
    }
    if (!ex.ref.empty()) table_bounds(c, ex, e);
    if (const TensorView* mv = masks_zero_gradient(c, e)) {
      if (!ex.ref.empty()) zero_masked_expect(c, ex, *mv, e.options);
    }
    if ((op.name == "cross_entropy_backward" || op.name == "z_loss_backward") && !ex.ref.empty()) {
      zero_neg_inf_logits(c, ex, e);
    }
    if (op.variant != Variant::kNone) variant_extras(c, ex, e);
    return ex;
  }
  const SoftmaxOptions o = full_options(c);
  switch (op.custom) {
    case Custom::kCollapse:
      if (c.precision != 0) {
        ex.flags = ref::softmax_collapse_flags(view_of(c, c.x), static_cast<smax::Precision>(c.precision), o, 1);
      }
      break;
    case Custom::kGumbelNoise: {
      std::vector<int64_t> shape = c.out.shape;
      ex.ref = ref::gumbel_noise(shape, c.opt.axis, static_cast<uint64_t>(c.params["seed"]));
      ex.bound.assign(ex.ref.size(), 0.0);
      ex.exact_zero.assign(ex.ref.size(), 0);
      break;
    }
    case Custom::kGumbelSoftmaxBackward: {
      const float tau = static_cast<float>(c.params["tau"]);
      ex.ref = from_y_backward("gumbel_softmax_backward", view_of(c, c.y), view_of(c, c.dy), o, true, tau);
      const ref::RefRows Y = ref::ref_rows("fuzz", view_of(c, c.y), o, false);
      const ref::RefRows G = ref::ref_rows("fuzz", view_of(c, c.dy), o, false);
      const ref::RefRows T = ref::ref_rows("fuzz", view_of(c, c.y), o, true);
      const double cf = static_cast<float>(static_cast<float>(Y.scale) / tau);
      ex.bound.assign(ex.ref.size(), 0.0);
      ex.exact_zero.assign(ex.ref.size(), 0);
      ex.dot_gap.assign(ex.ref.size(), 0.0);
      for (int64_t r = 0; r < Y.rows; ++r) {
        double dot = 0.0, abs_dot = 0.0;
        for (int64_t k = 0; k < Y.n; ++k) {
          dot += Y.row(r)[k] * G.row(r)[k];
          abs_dot += std::fabs(Y.row(r)[k] * G.row(r)[k]);
        }
        const bool ovf = vjp_row_overflows(Y.row(r), G.row(r), Y.n);
        for (int64_t k = 0; k < Y.n; ++k) {
          const size_t i = static_cast<size_t>(dense_index(Y, r, k));
          ex.bound[i] = 2e-6 * cf * std::fabs(Y.row(r)[k]) * (std::fabs(G.row(r)[k]) + std::fabs(dot)) + 1e-30;
          // softmax_backward's dot term (smax/sampling.h): the same kernel.
          ex.dot_gap[i] = 1.02e-6 * cf * std::fabs(Y.row(r)[k]) * abs_dot;
          if (ovf) {
            ex.overflow_ok.resize(ex.ref.size(), 0);
            ex.overflow_ok[i] = 1;
          }
          if (T.row(r)[k] == -kInfD && ex.ref[i] == 0.0) ex.exact_zero[i] = 1;
        }
      }
      break;
    }
    case Custom::kSamplingFilter: {
      smax::SampleOptions so;
      so.temperature = static_cast<float>(c.params["temperature"]);
      so.top_k = static_cast<int64_t>(c.params["top_k"]);
      so.top_p = static_cast<float>(c.params["top_p"]);
      so.seed = static_cast<uint64_t>(c.params["seed"]);
      const ref::FilterRef f = ref::sampling_filter(view_of(c, c.x), so, o);
      ex.ref = f.values;
      ex.bound.assign(ex.ref.size(), 0.0);
      ex.exact_zero.assign(ex.ref.size(), 0);
      ex.index_free.assign(f.fragile.begin(), f.fragile.end());
      break;
    }
    case Custom::kSoftNms:
      ex.nms = ref::soft_nms(view_of(c, c.x), view_of(c, c.y), c.nms);
      break;
    case Custom::kLce:
    case Custom::kLceBackward:
    case Custom::kLceFused: lce_expect(c, ex); break;
    case Custom::kNone: break;
  }
  return ex;
}

// Elementwise backward passes: rows whose upstream gradient dy holds +-inf or
// NaN. The headers do not define 0 * inf there (e.g. dy = -inf at a masked
// entry, where y = 0: the library leaves masked entries out of <dy, y>, the
// oracles compute -inf * 0 = NaN), so those rows' values are not compared
// (everything else is still checked).
void unchecked_rows(Case& c, Expect& ex) {
  if (!c.dy.present || is_loss_backward(*c.op) || ex.ref.empty() || c.dy.shape != c.shape) return;
  const ref::RefRows D = ref::ref_rows("fuzz", view_of(c, c.dy), full_options(c), false);
  // softpick_backward leaves masked entries (t = -inf) out of <dy, y>
  // (smax/rescaled.h): a non-finite dy there reaches no other entry, so the
  // row stays checked (normalizers/softpick_backward_neg_inf_logits_nan_ref).
  ref::RefRows T;
  bool skip_masked = c.op->name == "softpick_backward" && c.x.present && c.x.shape == c.shape;
  if (skip_masked) {
    T = ref::ref_rows("fuzz", view_of(c, c.x), full_options(c), true);
    skip_masked = T.rows == D.rows && T.n == D.n;
  }
  for (int64_t r = 0; r < D.rows; ++r) {
    bool bad = false;
    for (int64_t k = 0; k < D.n; ++k) {
      if (skip_masked && T.row(r)[k] == -kInfD) continue;
      bad |= !std::isfinite(D.row(r)[k]);
    }
    if (!bad) continue;
    ++g_stats.nonfinite_dy_rows;
    ex.unchecked.resize(ex.ref.size(), 0);
    ex.unchecked_row.resize(static_cast<size_t>(D.rows), 0);
    ex.unchecked_row[static_cast<size_t>(r)] = 1;
    for (int64_t k = 0; k < D.n; ++k) {
      const size_t i = static_cast<size_t>(dense_index(D, r, k));
      if (i < ex.unchecked.size()) ex.unchecked[i] = 1;
    }
  }
}

// Loss gradients for a non-finite upstream dloss: the headers do not say
// what G * 0 gives for G = +-inf / NaN (entries outside a sparse support,
// p_j (..) - q_j that cancel exactly); the oracles follow IEEE (NaN), the
// library often writes the structural 0. Such cases are checked for
// everything but the values (counted as known_open).
bool nonfinite_dloss(Case& c) {
  const bool lce = c.op->custom == Custom::kLceBackward || c.op->custom == Custom::kLceFused;
  const Operand& g = lce ? c.dloss : c.dy;
  if (!(is_loss_backward(*c.op) || lce) || !g.present) return false;
  for (double v : dense_f32(c, g)) {
    if (!std::isfinite(v)) return true;
  }
  return false;
}

void check_result(Case& c, Expect& ex, const Extra& extra) {
  Check ck;
  const OpDef& op = *c.op;
  if (nonfinite_dloss(c)) {
    ++g_stats.known_open;
    return;
  }
  if (op.custom == Custom::kCollapse) {
    if (c.out.present) {
      const std::vector<double> f = dense_f32(c, c.out);
      double sum = 0.0;
      for (size_t i = 0; i < f.size(); ++i) {
        if (f[i] != 0.0 && f[i] != 1.0) ck.fail(i, f[i], 0, 0, "(flag not 0 / 1)");
        sum += f[i];
        if (!ex.flags.empty() && f[i] != ex.flags[i]) ck.fail(i, f[i], ex.flags[i], 0, "(collapse flag differs from the reference)");
      }
      const double frac = f.empty() ? 0.0 : sum / static_cast<double>(f.size());
      if (std::fabs(frac - extra.collapse) > 1e-12) ck.fail(0, extra.collapse, frac, 0, "(fraction != mean of the flags)");
    }
    if (!(extra.collapse >= 0.0 && extra.collapse <= 1.0)) ck.fail(0, extra.collapse, 0, 0, "(fraction outside [0, 1])");
  } else if (op.custom == Custom::kSoftNms) {
    const smax::SoftNmsResult& want = ex.nms;
    std::vector<int64_t> idx;
    std::vector<double> sc;
    if (c.nms_vector_api) {
      idx = extra.nms.indices;
      sc.assign(extra.nms.scores.begin(), extra.nms.scores.end());
    } else {
      const std::vector<int64_t> all = dense_i64(c, c.out_index);
      const std::vector<double> alls = dense_f32(c, c.out);
      if (extra.nms_count < 0 || extra.nms_count > static_cast<int64_t>(all.size())) ck.fail(0, extra.nms_count, 0, 0, "(count)");
      for (size_t i = 0; i < all.size(); ++i) {
        if (static_cast<int64_t>(i) < extra.nms_count) {
          idx.push_back(all[i]);
          sc.push_back(alls[i]);
        } else if (all[i] != -1 || alls[i] != 0.0) {
          ck.fail(i, alls[i], 0, 0, "(unused entries must be -1 / 0)");
        }
      }
    }
    if (idx != want.indices) {
      ck.fail(0, idx.size(), want.indices.size(), 0, "(kept indices differ from the reference)");
    } else {
      for (size_t i = 0; i < sc.size(); ++i) {
        const double r = want.scores[i];
        if (sc[i] != r && std::fabs(sc[i] - r) > 1e-6 * std::fabs(r)) ck.fail(i, sc[i], r, 1e-6 * std::fabs(r), "(score)");
      }
    }
  } else if (op.custom == Custom::kLce || op.custom == Custom::kLceBackward || op.custom == Custom::kLceFused) {
    if (c.out.present) check_values(ck, dense_f32(c, c.out), ex.ref, ex.bound, nullptr, nullptr, "(loss bound)");
    if (c.dloss.present) {
      check_values(ck, dense_f32(c, c.dhidden), ex.ref2, ex.bound2, nullptr, nullptr, "(dhidden bound)");
      check_values(ck, dense_f32(c, c.dweight), ex.ref3, ex.bound3, nullptr, nullptr, "(dweight bound)");
      if (c.dbias.present) check_values(ck, dense_f32(c, c.dbias), ex.ref4, ex.bound4, nullptr, nullptr, "(dbias bound)");
    }
  } else if (op.custom == Custom::kSamplingFilter) {
    // Exact, except that a fragile row (top-p cut within the oracle's
    // tolerance) may keep one entry more or less.
    const std::vector<double> out = dense_f32(c, c.out);
    SoftmaxOptions axis_only;
    axis_only.axis = c.opt.axis;
    const ref::RefRows R = ref::ref_rows("fuzz", view_of(c, c.out), axis_only, false);
    for (int64_t r = 0; r < R.rows; ++r) {
      int diffs = 0;
      for (int64_t k = 0; k < R.n; ++k) {
        const size_t i = static_cast<size_t>(dense_index(R, r, k));
        const double o = out[i], w = ex.ref[i];
        const bool same = (std::isnan(o) && std::isnan(w)) || o == static_cast<double>(static_cast<float>(w));
        if (same) continue;
        if (ex.index_free[static_cast<size_t>(r)] && (o == -kInfD || w == -kInfD) && diffs++ == 0) continue;
        ck.fail(i, o, w, 0, "(sampling_filter value)");
      }
    }
  } else {
    if (c.out.present && !ex.ref.empty()) {
      if (!ex.unchecked.empty()) {  // not compared: the output stands in for the reference
        const std::vector<double> out = dense_f32(c, c.out);
        for (size_t i = 0; i < ex.unchecked.size() && i < out.size() && i < ex.ref.size(); ++i) {
          if (!ex.unchecked[i]) continue;
          ex.ref[i] = out[i];
          if (i < ex.exact_zero.size()) ex.exact_zero[i] = 0;
        }
      }
      const bool gap = std::any_of(ex.dot_gap.begin(), ex.dot_gap.end(), [](double v) { return v > 0; });
      check_values(ck, dense_f32(c, c.out), ex.ref, ex.bound, &ex.exact_zero, gap ? &ex.dot_gap : nullptr,
                   "(documented bound)", ex.overflow_ok.empty() ? nullptr : &ex.overflow_ok);
    }
    for (Expect::Out& x : ex.extras) {
      const std::string what = std::string("(") + x.o->name + " bound)";
      const std::vector<double> got = dense_f32(c, *x.o);
      if (x.o == &c.dprow) {  // per row: rows with a non-finite dy are not compared
        for (size_t r = 0; r < ex.unchecked_row.size() && r < x.ref.size() && r < got.size(); ++r) {
          if (ex.unchecked_row[r]) x.ref[r] = got[r];
        }
      }
      check_values(ck, got, x.ref, x.bound, nullptr, nullptr, what.c_str());
    }
    if (c.out_index.present) {
      const std::vector<int64_t> got = dense_i64(c, c.out_index);
      if (got.size() != ex.ref_index.size()) ck.fail(0, got.size(), ex.ref_index.size(), 0, "(index count)");
      for (size_t i = 0; i < got.size() && i < ex.ref_index.size(); ++i) {
        if (got[i] == ex.ref_index[i]) continue;
        if (!ex.index_free.empty() && ex.index_free[i] && got[i] >= -1 && got[i] < c.n) continue;
        ck.fail(i, got[i], ex.ref_index[i], 0, "(index differs)");
      }
    }
  }
  if (ck.failures) violation(c, std::to_string(ck.failures) + " output element(s) wrong; first: " + ck.first);
}

}  // namespace

const char* group_name(Group g) {
  switch (g) {
    case Group::kNormalizers: return "normalizers";
    case Group::kLosses: return "losses";
    case Group::kSampling: return "sampling";
    case Group::kOptions: return "options";
  }
  return "?";
}

bool parse_group(const std::string& name, Group* g) {
  for (Group x : {Group::kNormalizers, Group::kLosses, Group::kSampling, Group::kOptions}) {
    if (name == group_name(x)) {
      *g = x;
      return true;
    }
  }
  return false;
}

const GroupStats& group_stats() { return g_stats; }

void run_group_one(Group group, const uint8_t* data, size_t size) {
  ++g_stats.runs;
  Reader r(data, size);
  const std::vector<OpDef>& ops = group_ops(group);
  Case c;
  c.op = &ops[r.u8() % ops.size()];
  // Lift the previous input's cap first: supported_targets() is after the
  // cap, so the choice below would depend on the input run before.
  smax::set_max_target("");
  const std::vector<std::string> targets = smax::supported_targets();
  c.target_cap = targets[r.u8() % targets.size()];
  if (c.op->custom == Custom::kSoftNms) decode_soft_nms(c, r);
  else if (c.op->custom == Custom::kLce || c.op->custom == Custom::kLceBackward || c.op->custom == Custom::kLceFused) decode_lce(c, r);
  else decode_rowwise(c, r);
  finish_decode(c, r);
  for (Operand* o : c.operands()) {
    if (o->present && o->unallocatable && !c.must_reject) {
      ++g_stats.skipped;
      return;
    }
  }
  fill_inputs(c, r);
  smax::set_max_target(c.target_cap);
  Expect ex;
  bool ref_ok = false;
  std::string ref_error;
  if (!c.must_reject) {
    try {
      ex = expect_of(c);
      unchecked_rows(c, ex);
      ref_ok = true;
    } catch (const smax::Error& e) {
      ref_error = e.what();
    }
  }
  if (std::getenv("SMAX_FUZZ_TRACE")) {  // the case before the call (for reports that abort inside it)
    std::fprintf(stderr, "smax fuzz case: %s\n", describe(c).c_str());
  }
  const std::vector<float> f32_before = c.f32;
  const std::vector<int64_t> i64_before = c.i64;
  const std::vector<uint8_t> bytes_before = c.bytes;
  bool ok = false;
  Extra extra;
  const std::string msg = call(c, c.opt, &ok, &extra);
  if (!ok) {
    ++g_stats.rejected;
    if (std::memcmp(f32_before.data(), c.f32.data(), c.f32.size() * sizeof(float)) != 0 ||
        i64_before != c.i64 || bytes_before != c.bytes) {
      violation(c, "a rejected call wrote to memory: " + msg);
    }
    if (!c.must_reject) {
      if (!ref_ok) {  // the oracle rejects it too: a gap of this model, not of smax
        ++g_stats.grey;
        return;
      }
      bool grey = false;
      for (Operand* o : c.operands()) {
        if (!o->present || o->input) continue;
        if (folds(*o)) grey = true;
        // Address ranges that overlap without a shared element (an input,
        // or another output such as ssmax_backward's ds inside dsrc's span):
        // the library's overlap check is conservative there.
        for (Operand* other : c.operands()) {
          if (other != o && other->present && overlaps(*o, *other)) grey = true;
        }
      }
      if (!grey) violation(c, "a valid call was rejected: " + msg);
      ++g_stats.grey;
    }
    return;
  }
  ++g_stats.accepted;
  if (c.must_reject) violation(c, "an invalid call was accepted");
  if (!ref_ok) violation(c, "accepted, but the float64 oracle rejects the call: " + ref_error);
  // Nothing outside the outputs changed.
  {
    std::vector<char> w32(c.f32.size(), 0), w64(c.i64.size(), 0);
    for (Operand* o : c.operands()) {
      if (!o->present || o->input) continue;
      for (int64_t off : offsets_of(*o)) {
        (o->arena == Arena::kF32 ? w32 : w64)[static_cast<size_t>(o->origin + off)] = 1;
      }
    }
    for (size_t i = 0; i < c.f32.size(); ++i) {
      if (!w32[i] && std::memcmp(&f32_before[i], &c.f32[i], sizeof(float)) != 0) {
        violation(c, "f32 memory outside the outputs changed at arena index " + std::to_string(i));
      }
    }
    for (size_t i = 0; i < c.i64.size(); ++i) {
      if (!w64[i] && i64_before[i] != c.i64[i]) {
        violation(c, "i64 memory outside the outputs changed at arena index " + std::to_string(i));
      }
    }
    if (bytes_before != c.bytes) violation(c, "the bool mask changed");
  }
  check_result(c, ex, extra);

  // Determinism: the same bits with one thread (when the inputs survived).
  bool overlap = c.alias;
  for (Operand* o : c.operands()) {
    if (!o->present || o->input) continue;
    for (Operand* in : c.operands()) {
      if (in->present && in->input && overlaps(*o, *in)) overlap = true;
    }
  }
  if (!overlap && c.opt.threads != 1) {
    const std::vector<float> f1 = c.f32;
    const std::vector<int64_t> i1 = c.i64;
    const double collapse1 = extra.collapse;
    const smax::SoftNmsResult nms1 = extra.nms;
    SoftmaxOptions one = c.opt;
    one.threads = 1;
    bool ok1 = false;
    Extra extra1;
    const std::string m1 = call(c, one, &ok1, &extra1);
    if (!ok1) violation(c, "the threads=1 rerun failed: " + m1);
    if (std::memcmp(f1.data(), c.f32.data(), f1.size() * sizeof(float)) != 0 || i1 != c.i64 ||
        std::memcmp(&collapse1, &extra1.collapse, sizeof(double)) != 0 ||
        nms1.indices != extra1.nms.indices || nms1.scores != extra1.nms.scores) {
      violation(c, "results differ between threads=" + std::to_string(c.opt.threads) + " and threads=1");
    }
  }
}

}  // namespace smax_fuzz
