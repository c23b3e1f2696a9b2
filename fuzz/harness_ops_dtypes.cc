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
//  * f64 inputs of the ops with a float64 path (every table op but the
//    collapse detector and the integer ops) run in float64 there: their
//    oracle then models that path (reference::Float64Semantics: logits
//    x * s + mask and the derived factors in double; float64_oracle).
#include "harness_ops_internal.h"
#include "typed_call.h"

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

}  // namespace

bool float64_oracle(const Case& c) {
  return c.in_dtype == DType::kF64 && smax_cli::has_float64_path(c.op->name);
}

bool storage_drawn(const Case& c) {
  return c.in_dtype != DType::kF32 || c.out_dtype != DType::kF32;
}

void decode_storage(Case& c, Reader& r) {
  const uint8_t b = r.u8();
  if (!eligible(c)) return;
  StorageDraw draw = draw_storage(b);
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
