// fuzz/harness_ops_dtypes.cc: storage dtypes in the ops harness
// (harness_ops_internal.h). A case of a table op may store its floating
// operands (the f32 arena's: logits, saved outputs, gradients, masks,
// weights, probability targets, per-row parameters and every floating
// output) as f64, f16 or bf16, inputs and outputs independently (bf16
// logits with an f32 loss; f32 logits with an f16 gradient; ...).
//
// How the check stays exact: the inputs' values are rounded to their dtype
// in the f32 arena first, so the float64 oracle (which reads the f32 arena)
// sees exactly the values the library reads from the typed arena. Outputs
// are compared with the op's bound plus half an ulp of their dtype
// (docs/dtypes.md: "the op's f32 bound plus half an ulp of T"), and a value
// equal to the reference rounded to their dtype passes.
//
// Drawn from the last byte an input reads (so every earlier corpus file
// keeps its f32 meaning when it has no byte left there), only where the
// storage cannot change what the call means:
//  * table ops (no custom harness), no corruption, no aliasing and no two
//    operands overlapping (inputs and outputs live in separate arenas);
//  * f64 logits of the ops with a float64 path (docs/dtypes.md: cross_entropy,
//    the sparse normalisers and their losses, the z-losses, softpick,
//    clipped softmax, StableMax, the re-weighting normalisers, the samplers
//    and their backward) only with scale = temperature = 1 and no
//    additive mask: that path forms t = x * s + mask in double, the f32
//    oracle fl(fl(x * s) + mask);
//  * never f64 inputs for ssmax, the softplus normaliser (and their
//    backward) and gumbel_softmax: their float64 paths take c = s ln n,
//    lambda = ln N / ln d and t + g in double, the f32 oracle rounds them to
//    f32 (the float64 paths are checked against long double oracles in
//    tests/test_rescaled_f64.cc, test_reweight_f64.cc and
//    test_sampling_f64.cc).
#include "harness_ops_internal.h"

namespace smax_fuzz {
namespace ops_internal {

namespace {

bool eligible(Case& c) {
  if (c.op->custom != Custom::kNone || c.must_reject || c.alias) return false;
  const std::vector<Operand*> ops = c.operands();
  for (Operand* o : ops) {
    if (!o->present) continue;
    if (o->wrong_dtype || o->null_data || o->unallocatable || o->rank_override != -1000) return false;
    for (Operand* other : ops) {
      if (other != o && other->present && overlaps(*o, *other)) return false;
    }
  }
  return true;
}

bool has_float64_path(const std::string& name) {
  static const char* const kOps[] = {
      "cross_entropy",         "cross_entropy_backward",
      "sparse_softmax",        "sparse_softmax_backward",
      "sparsemax",             "entmax15",
      "entmax_bisect",         "sparsemax_loss",
      "sparsemax_loss_backward", "entmax15_loss",
      "entmax15_loss_backward", "entmax_bisect_loss",
      "entmax_bisect_loss_backward", "sparse_softmax_loss",
      "sparse_softmax_loss_backward", "z_loss",
      "z_loss_backward",       "spherical_z_loss",
      "spherical_z_loss_backward", "softpick",
      "softpick_backward",     "stablemax",
      "stablemax_backward",    "stablemax_cross_entropy",
      "stablemax_cross_entropy_backward", "clipped_softmax",
      "clipped_softmax_backward", "self_adjust_softmax",
      "self_adjust_softmax_backward", "sigmoid_normalizer",
      "sigmoid_normalizer_backward", "power_softmax",
      "power_softmax_backward", "probability_temperature",
      "probability_temperature_backward", "logit_standardization",
      "logit_standardization_backward", "softmax_topk",
      "sampling_filter",       "sample",
      "gumbel_max",            "gumbel_softmax_backward"};
  for (const char* op : kOps) {
    if (name == op) return true;
  }
  return false;
}

// f64 inputs change what these ops compute beyond the f32 oracle's bound
// (see the header).
bool f64_differs_from_oracle(const std::string& name) {
  return name == "ssmax" || name == "ssmax_backward" || name == "softplus_normalizer" ||
         name == "softplus_normalizer_backward" || name == "gumbel_softmax";
}

}  // namespace

bool storage_drawn(const Case& c) {
  return c.in_dtype != DType::kF32 || c.out_dtype != DType::kF32;
}

void decode_storage(Case& c, Reader& r) {
  const uint8_t b = r.u8();
  if (!eligible(c)) return;
  StorageDraw draw = draw_storage(b);
  if (draw.in == DType::kF64 && has_float64_path(c.op->name) &&
      (c.opt.scale != 1.0f || c.opt.temperature != 1.0f || c.add_mask.present)) {
    draw.in = DType::kF32;
  }
  if (draw.in == DType::kF64 && f64_differs_from_oracle(c.op->name)) draw.in = DType::kF32;
  if (!draw.typed()) return;
  c.in_dtype = draw.in;
  c.out_dtype = draw.out;
  make_typed_arenas(c.f32, draw, &c.typed_in, &c.typed_out);
}

TensorView typed_view(Case& c, const Operand& o) {
  const DType d = o.input ? c.in_dtype : c.out_dtype;
  std::vector<unsigned char>& arena = o.input ? c.typed_in : c.typed_out;
  return tensor_view(o, d, arena.data() + o.origin * smax::dtype_size(d));
}

std::vector<double> dense_typed(Case& c, const Operand& o) {
  return o.input ? dense_in_arena(o, c.typed_in, c.in_dtype, c.f32.size())
                 : dense_in_arena(o, c.typed_out, c.out_dtype, c.f32.size());
}

}  // namespace ops_internal
}  // namespace smax_fuzz
