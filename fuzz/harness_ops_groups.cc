// fuzz/harness_ops_groups.cc: the ops of each group (in smax/op_list.inc's
// order: the first input byte picks one), their parameter choices, and a
// case's description
// (part of the ops harness, harness_ops.h; what the parts share:
// harness_ops_internal.h).
#include "harness_ops_internal.h"

namespace smax_fuzz {
namespace ops_internal {

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
                     "table, no custom code in fuzz/harness_ops*.cc)\n",
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
    // Every parameter the harness draws has fuzz values (fails at start-up,
    // not only when an input happens to pick the op).
    for (const auto* group : {&norm, &loss, &samp, &opts}) {
      for (const OpDef& d : *group) {
        if (d.ext == nullptr) continue;
        for (const smax_cli::ExtParam& p : d.ext->params) param_choices(d.name, p.name);
      }
    }
    return std::array<std::vector<OpDef>, 4>{norm, loss, samp, opts};
  }();
  return groups[static_cast<int>(g)];
}

// The op's own declaration of `p` in the CLI's table; for the ops the harness
// drives with its own code (no table entry), the first table op declaring a
// parameter of that name (sample's temperature for sampling_filter, ...).
const ParamChoice& param_choices(const std::string& op, const std::string& p) {
  auto declared = [&](const smax_cli::ExtOp& e) -> const smax_cli::ExtParam* {
    for (const smax_cli::ExtParam& q : e.params) {
      if (q.name == p) return &q;
    }
    return nullptr;
  };
  const smax_cli::ExtParam* found = nullptr;
  if (const smax_cli::ExtOp* own = smax_cli::find_ext_op(op)) found = declared(*own);
  for (size_t i = 0; found == nullptr && i < smax_cli::ext_ops().size(); ++i) {
    found = declared(smax_cli::ext_ops()[i]);
  }
  if (found == nullptr || found->fuzz.valid.empty()) {
    std::fprintf(stderr,
                 "smax fuzz: parameter %s of %s has no fuzz values (ExtParam::fuzzed in "
                 "testing/table_*.cc)\n",
                 p.c_str(), op.c_str());
    std::abort();
  }
  return found->fuzz;
}

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
     << " dtypes=" << smax::dtype_name(c.in_dtype) << "->" << smax::dtype_name(c.out_dtype)
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
    os << "\n  " << o->name << ":";
    describe_view(os, *o);
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
  if (c.typed && o.arena == Arena::kF32) return typed_view(c, o);
  DType dtype = o.arena == Arena::kBool ? DType::kBool : o.arena == Arena::kI64 ? DType::kI64 : DType::kF32;
  if (o.wrong_dtype) dtype = dtype == DType::kF32 ? DType::kI64 : DType::kF32;
  void* data = nullptr;
  if (o.null_data) {
    data = nullptr;
  } else if (o.arena == Arena::kBool) {
    data = c.bytes.data() + o.origin;
  } else if (o.arena == Arena::kI64) {
    data = c.i64.data() + o.origin;
  } else {
    data = c.f32.data() + o.origin;
  }
  return tensor_view(o, dtype, data);
}

bool is_loss_backward(const OpDef& op) {
  return op.ext && op.ext->out_shape == smax_cli::OutShape::kLoss && op.ext->needs_dy;
}

}  // namespace ops_internal
}  // namespace smax_fuzz
