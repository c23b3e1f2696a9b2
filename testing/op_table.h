// testing/op_table.h: `smax run --op NAME` for every op beyond the softmax
// family (normalisers, losses, samplers): a table of ops, each with how to
// call the library and how to call its float64 oracle (--check compares with
// it within the op's documented bound, src/reference/bounds.h).
//
// Inputs are generated from the shape: `x` from --dist, class targets
// uniform over [0, C) (i64), an upstream gradient `dy` ~ N(0, 1), and for
// backward ops the saved forward output `y` computed by the library.
// Op parameters come from --param NAME=VALUE[,NAME=VALUE...] (e.g.
// --param alpha=1.3,k=50); each op declares its parameters, their types and
// defaults. Values are held as doubles (ExtCall::params) but parsed and
// printed in their type: integers reject fractions ("k=2.5") and print as
// "k=10"; booleans accept exactly true, false, 1 or 0 and print as
// "hard=true".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data.h"
#include "reference/bounds.h"
#include "smax/c/smax.h"
#include "smax/smax.h"

namespace smax_cli {

/// How the output's shape follows from the input shape.
enum class OutShape {
  kSame,      ///< x's shape
  kRows,      ///< x's shape with the axis of size 1 (one value per row)
  kLoss,      ///< one element for reduction mean/sum, one per row for none
  kTopK,      ///< x's shape with the axis of size k (param "k")
};

/// Everything one call sees. Views are contiguous row-major.
struct ExtCall {
  smax::TensorView x;       ///< logits (f32)
  smax::TensorView y;       ///< saved forward output (backward ops)
  smax::TensorView dy;      ///< upstream gradient (backward ops; loss backward: dloss)
  smax::TensorView target;  ///< i64 class indices (losses)
  smax::TensorView out;     ///< f32 output
  smax::TensorView out_index;  ///< i64 output (samplers, top-k indices), else empty
  smax::SoftmaxOptions options;
  smax::LossOptions loss;
  std::map<std::string, double> params;  ///< declared params, defaults filled in
  double param(const std::string& name) const { return params.at(name); }
};

/// The same call as the C ABI sees it (include/smax/c/smax.h): ExtCall's
/// views and options as C structs (masks and class weights included; the
/// options point into this object, so it does not move).
struct CCall {
  smax_tensor x, y, dy, target, out, out_index;
  smax_softmax_options options;
  smax_loss_options loss;
  smax_tensor additive_mask, bool_mask, weight;  ///< what the options point to
  CCall() = default;
  CCall(const CCall&) = delete;
  CCall& operator=(const CCall&) = delete;
};
/// A C options struct as its init leaves it (the defaults):
/// `auto p = c_defaults(smax_ssmax_options_init);`.
template <class S>
S c_defaults(void (*init)(S*)) {
  S s;
  init(&s);
  return s;
}
/// `c` as C structs.
std::unique_ptr<CCall> c_call_of(const ExtCall& c);
/// A view as the C ABI's smax_tensor, field for field (all kMaxRank entries of
/// shape and strides, whatever the rank; an empty view: data NULL, rank 0).
smax_tensor c_tensor(const smax::TensorView& v);

/// The type of an op parameter (how --param parses it and how it prints).
enum class ParamType {
  kReal,  ///< any finite number ("0.43", "1e-6")
  kInt,   ///< an integer, |value| <= 2^53 (exact in a double)
  kBool,  ///< true, false, 1 or 0 (held as 1 / 0)
};
/// "real", "int", "bool".
const char* param_type_name(ParamType type);

/// The values the fuzz harness draws for a parameter (fuzz/harness_ops_decode.cc):
/// `valid` ones the op accepts, `invalid` ones it must reject with an error
/// naming the parameter. The order matters: an input byte picks by index, so
/// appending keeps old fuzz inputs decoding as before.
struct ParamFuzz {
  std::vector<double> valid, invalid;
};

struct ExtParam {
  std::string name;
  double fallback;
  std::string doc;
  ParamType type = ParamType::kReal;
  std::vector<double> choices = {};  ///< non-empty: the only values accepted
  ParamFuzz fuzz = {};               ///< empty valid: the fuzz harness refuses the op

  /// This parameter with its fuzz values: `{"k", 10, "doc"}.fuzzed({1, 2}, {0, -1})`.
  ExtParam fuzzed(std::vector<double> valid, std::vector<double> invalid) const {
    ExtParam p = *this;
    p.fuzz = {std::move(valid), std::move(invalid)};
    return p;
  }
};

/// A parameter value as the CLI prints it: "10", "true", "0.43".
std::string format_param(const ExtParam& p, double value);
/// The same as a JSON value: 10, true, 0.43.
std::string json_param(const ExtParam& p, double value);
/// "alpha=1.5, n_iter=50" for the op's defaults, or for `values`.
std::string format_params(const std::vector<ExtParam>& params,
                          const std::map<std::string, double>* values = nullptr);

struct ExtOp {
  std::string name;
  std::string summary;
  OutShape out_shape = OutShape::kSame;
  bool needs_target = false;
  bool needs_dy = false;        ///< backward ops (dy has the output shape of `forward`)
  bool index_output = false;    ///< also writes out_index (i64)
  std::vector<ExtParam> params;
  /// For backward ops: the forward op that produces `y` from `x` (ExtCall.out = y).
  std::function<void(const ExtCall&)> forward;
  std::function<void(const ExtCall&)> run;
  /// float64 oracle in the logical order of `out` (empty: --check not
  /// offered). --check applies the op's documented bound, `bounds`.
  std::function<std::vector<double>(const ExtCall&)> reference;
  /// --check compares out_index (exact) instead of out.
  bool check_indices = false;
  /// The same call through the C ABI (smax_<name>, its options struct set
  /// from the same parameters); returns its status. tests/test_c_abi_ops.cc
  /// requires one for every op and checks that it gives `run`'s bits, or
  /// its error (status and message) with the outputs untouched.
  std::function<smax_status(const ExtCall&, const CCall&)> c_run = nullptr;
  /// The op's documented bound (src/reference/bounds.h): its rule, the view
  /// its rows come from, and the public header that states it. Every op
  /// with a `reference` has one, except check_indices ops (exact); the
  /// table refuses to start otherwise.
  smax::reference::BoundRule bounds = nullptr;
  smax::reference::BoundRowsFrom bound_rows = smax::reference::BoundRowsFrom::kX;
  std::string bound_header = {};
  /// Backward passes that write exact 0 at every entry the options' masks
  /// mask, whatever the row holds (NaN rows, all-masked rows included;
  /// Rowwise::zero_masked_outputs); the masks of the rows' view count
  /// (bound_rows: x, or the saved y). The fuzz harness expects those zeros.
  bool zeroes_masked_gradient = false;
};

/// One ready-to-run call of a table op: owns the generated inputs and the
/// outputs; `call` views them. Used by `smax run` and bench/bench_ops.cc.
struct ExtInstance {
  std::vector<float> x, y, dy, out;
  std::vector<int64_t> target, out_index;
  std::vector<int64_t> shape, out_shape;  ///< out_shape: the shape `out` is written with
  ExtCall call;
};

/// Generates the inputs of `op` for a contiguous tensor of `shape`: x from
/// `dist` and `seed` (data.h), class targets uniform over [0, C), dy ~ N(0, 1),
/// and y = op.forward(x) for backward ops. `call.params` must be filled and
/// `call.options` / `call.loss` set by the caller before (they are kept).
std::unique_ptr<ExtInstance> make_instance(const ExtOp& op, const std::vector<int64_t>& shape,
                                           ExtCall call, const Dist& dist, uint64_t seed);

/// Declared params with their defaults, overridden by "NAME=VALUE,..."
/// (throws UsageError naming --param for unknown names, with a "did you
/// mean" and the op's parameters, for values not of the parameter's type or
/// not among its choices, and for a name given twice).
std::map<std::string, double> parse_params(const ExtOp& op, const std::string& text);

/// Elements of a contiguous tensor of `shape` (the product of its dims).
int64_t product(const std::vector<int64_t>& shape);

/// The call as the documented bounds see it (src/reference/bounds.h): the
/// views, options, loss options and parameters of `c`.
smax::reference::BoundCall bound_call_of(const ExtCall& c);
/// The layout of `op`'s calls as its bound sees it.
smax::reference::BoundShape bound_shape_of(const ExtOp& op);
/// `op`'s documented bound for `call` given the oracle's output `ref`
/// (check_indices ops: 0, exact). Throws smax::Error (kInvalidArgument) for
/// an op without a bound rule.
smax::reference::ElementBounds op_bounds(const ExtOp& op, const smax::reference::BoundCall& call,
                                         const std::vector<double>& ref);
/// Sets `header` as the bound_header of ops[first...] (each family's table
/// ends with it: its ops' bounds are stated in its public header).
void set_bound_header(std::vector<ExtOp>& ops, size_t first, const char* header);

/// Every op of the table, in help order.
const std::vector<ExtOp>& ext_ops();
/// nullptr when `name` is not in the table.
const ExtOp* find_ext_op(const std::string& name);
/// Losses take --reduction.
inline bool is_loss(const ExtOp& op) { return op.out_shape == OutShape::kLoss; }
/// Every op `smax run --op` accepts: the softmax family (check.h), then the
/// table, in help order.
std::vector<std::string> all_op_names();

// Families register their ops here (testing/table_*.cc).
void add_sparse_ops(std::vector<ExtOp>& ops);
void add_rescaled_ops(std::vector<ExtOp>& ops);
void add_reweight_ops(std::vector<ExtOp>& ops);
void add_loss_ops(std::vector<ExtOp>& ops);
void add_sampling_ops(std::vector<ExtOp>& ops);
void add_quantized_ops(std::vector<ExtOp>& ops);

}  // namespace smax_cli
