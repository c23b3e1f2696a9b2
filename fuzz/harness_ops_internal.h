// fuzz/harness_ops_internal.h: what the parts of the ops harness
// (harness_ops.h) share: constants, the decoded case, the expectations and
// the functions each part defines.
//
//   harness_ops_decode.cc  input values, strides, an input decoded into a Case
//   harness_ops_groups.cc  the groups' ops, parameter choices, a case described
//   harness_ops_inputs.cc  the inputs filled, the options, the library called
//   harness_ops_expect.cc  the float64 reference and the bounds of a case
//   harness_ops.cc         a result checked; the entry points of harness_ops.h
//
// Internal to fuzz/: nothing here is a contract of the library.
#pragma once

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

#include "harness_ops.h"
#include "op_table.h"
#include "operands.h"
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
namespace ops_internal {

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

enum class Arena { kF32, kI64, kBool };

// An operand: its view (operands.h: shape, strides, origin in its arena, the
// corruptions) and the arena it lives in.
struct Operand : FuzzView {
  const char* name = "";
  bool present = false;
  Arena arena = Arena::kF32;
  bool input = true;
};

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

struct OpDef {
  std::string name;                        // the public function (error message prefix)
  const smax_cli::ExtOp* ext = nullptr;    // table op, or nullptr
  Custom custom = Custom::kNone;
  Variant variant = Variant::kNone;
};

// Parameter values: valid ones and ones the contract rejects (declared with
// the parameter in the CLI's op table, testing/table_*.cc).
using ParamChoice = smax_cli::ParamFuzz;

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
  // Storage dtypes of the f32-arena operands (harness_ops_dtypes.cc): the
  // inputs' values are rounded to in_dtype in the f32 arena (the oracle's
  // view) and stored in typed_in; outputs live in typed_out (out_dtype).
  // The arenas mirror the f32 arena's indices. `typed`: view_of hands the
  // library the typed arenas (set once the oracle has run).
  DType in_dtype = DType::kF32, out_dtype = DType::kF32;
  bool typed = false;
  std::vector<unsigned char> typed_in, typed_out;
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

// Custom-op results that are not in the arenas.
struct Extra {
  double collapse = 0.0;
  smax::SoftNmsResult nms;
  int64_t nms_count = 0;
};

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

using Check = FailureLog;

// ---- harness_ops_decode.cc -------------------------------------------------------------------

float logit(Reader& r);
float option_float(Reader& r);
int esize_of(const Operand& o);
bool shares_element(const Operand& a, const Operand& b);
bool overlaps(const Operand& a, const Operand& b);
bool same_operand_view(const Operand& a, const Operand& b);
void set_operand(Operand& o, const char* name, std::vector<int64_t> shape, Arena a, bool input,
                 Reader& r);
std::vector<int64_t> row_param_shape(Case& c, Reader& r);
std::vector<int64_t> row_output_shape(Case& c, Reader& r);
std::vector<int64_t> loss_output_shape(Case& c, Reader& r);
void decode_variant(Case& c, Reader& r);
void decode_rowwise(Case& c, Reader& r);
void decode_soft_nms(Case& c, Reader& r);
void decode_lce(Case& c, Reader& r);
bool folds(const Operand& o);
bool src_unused(const OpDef& op);
void finish_decode(Case& c, Reader& r);

// ---- harness_ops_dtypes.cc -------------------------------------------------------------------

void decode_storage(Case& c, Reader& r);
bool storage_drawn(const Case& c);
// True when the case's oracle models the op's float64 path (f64 inputs of
// an op that has one): expect_of runs the oracle under Float64Semantics.
bool float64_oracle(const Case& c);
TensorView typed_view(Case& c, const Operand& o);
std::vector<double> dense_typed(Case& c, const Operand& o);

// ---- harness_ops_groups.cc -------------------------------------------------------------------

const char* variant_name(Variant v);
const std::vector<OpDef>& group_ops(Group g);
const ParamChoice& param_choices(const std::string& op, const std::string& p);
void reject(Case& c, const std::string& why);
std::string describe(Case& c);
[[noreturn]] void violation(Case& c, const std::string& what);
TensorView view_of(Case& c, const Operand& o);
bool is_loss_backward(const OpDef& op);

// ---- harness_ops_inputs.cc -------------------------------------------------------------------

void fill_inputs(Case& c, Reader& r);
smax_cli::ExtCall ext_call(Case& c);
smax::CrossEntropyOptions lce_ce(Case& c);
SoftmaxOptions full_options(Case& c);
smax::EntmaxBisectOptions bisect_options(Case& c);
smax::SsmaxOptions ssmax_options(Case& c);
/// The sampler options of a sample / sampling_filter case: every filter
/// the case drew (temperature, top_k, top_p, seed, min_p,
/// min_tokens_to_keep, top_k_ties; an undrawn one keeps its default).
smax::SampleOptions sample_options(Case& c);
smax::reference::SparseLossSpec force_spec(Case& c);
smax::CrossEntropyOptions ce_options(Case& c, const smax::LossOptions& loss, bool outputs);
void invoke_variant(Case& c, const smax_cli::ExtCall& e);
std::vector<double> reference_of(Case& c, const smax_cli::ExtCall& e);
void invoke(Case& c, const SoftmaxOptions& opt_in, Extra* extra);
bool message_names_op(const std::string& op, const std::string& msg);
std::string call(Case& c, const SoftmaxOptions& opt, bool* ok, Extra* extra);

// ---- harness_ops_expect.cc -------------------------------------------------------------------

Row row_of(const ref::RefRows& R, int64_t r);
ref::BoundCall bound_call(Case& c, const smax_cli::ExtCall& e);
void table_bounds(Case& c, Expect& ex, smax_cli::ExtCall& e);
std::vector<double> dense_f32(Case& c, const Operand& o);
std::vector<int64_t> dense_i64(Case& c, const Operand& o);
void lce_expect(Case& c, Expect& ex);
std::vector<double> from_y_backward(const char* fn, const TensorView& y, const TensorView& dy,
                                    const SoftmaxOptions& o, bool gumbel, float tau);
const TensorView* masks_zero_gradient(Case& c, const smax_cli::ExtCall& e);
void zero_masked_expect(Case& c, Expect& ex, const TensorView& v, const SoftmaxOptions& o);
std::vector<double> ce_logit_rows(Case& c, const smax_cli::ExtCall& e, const ref::RefRows& R);
void zero_neg_inf_logits(Case& c, Expect& ex, const smax_cli::ExtCall& e);
void variant_extras(Case& c, Expect& ex, const smax_cli::ExtCall& e);
Expect expect_of(Case& c);
void unchecked_rows(Case& c, Expect& ex);
bool nonfinite_dloss(Case& c);

// ---- harness_ops.cc --------------------------------------------------------------------------

extern GroupStats g_stats;
void check_values(Check& ck, const std::vector<double>& out, const std::vector<double>& refv,
                  const std::vector<double>& bound, const std::vector<char>* exact_zero,
                  const std::vector<double>* gap, const char* what,
                  const std::vector<char>* overflow_ok = nullptr,
                  DType out_dtype = DType::kF32);
void check_result(Case& c, Expect& ex, const Extra& extra);

}  // namespace ops_internal
}  // namespace smax_fuzz
