// src/core/rowwise.h: the generic driver for row-wise ops (normalisers, their
// backward passes, per-row losses, samplers).
//
// An op that maps each row (the reduced axis of a strided tensor) to a row
// and/or to per-row values declares its operands on a Rowwise, then runs a
// row function. Rowwise does everything that is not the op's math:
//  * validation (views, dtypes, shapes, broadcasting, overlaps, options) with
//    errors named after the op and the argument, all before any write;
//  * the logit transform shared with softmax: an input declared as logits is
//    seen by the row function as t_i = fl(fl(x_i * s) + additive_mask_i), and
//    t_i = -inf where bool_mask_i == 0 (s = scale / temperature rounded to
//    f32, exactly SoftmaxOptions' semantics). Row functions treat -inf as
//    "masked": exact 0 output and no gradient;
//  * gathering strided rows into contiguous scratch, and scattering;
//  * exact in-place aliasing (an output that is the same view as an input is
//    written through scratch, so row functions never see aliased pointers);
//  * the fixed task grid: rows are independent and a row is computed by one
//    task, so results are bitwise identical for any thread count.
//
// Operand kinds:
//  * input     floating, src's shape (the first input defines the shape and axis)
//  * output    floating, src's shape
//  * row input floating or i64, broadcast (NumPy rules) to src's shape with
//              the axis of size 1 (keepdim form): per-row parameters (alpha,
//              s, bias) or class targets
//  * row output floating, src's shape without the axis or with it of size 1:
//              per-row results (loss, lse, dalpha, counts)
//
// Storage dtypes. Every floating operand (and the additive mask) may be f32,
// f64, f16 or bf16, each independently. run() (f32 arithmetic) hands row
// functions f32 rows: an input that is not f32 is widened (f16 / bf16
// exactly, f64 rounded to nearest) into the row's scratch as it is gathered,
// and an output that is not f32 is computed into scratch and rounded once
// (to nearest even) as it is scattered. So the op's f32 bound holds for f32
// outputs, and a narrow output adds the rounding to its type (half an ulp of
// it). run<double>() (float64 arithmetic, for ops with a float64 path) hands
// them float64 rows: every input widened exactly, logits formed in double
// (t = x * s + mask with s = double(scale) / double(temperature)), outputs
// rounded once from double to their dtype. Only one row at a time is
// widened: never a copy of the whole tensor.
//
// The row function is called once per row with a RowArgs (RowArgs64); it
// must write all n elements of every out[k] and every row_out[k]; it must
// not throw.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/convert.h"
#include "core/execution.h"
#include "core/geometry.h"
#include "core/stream_stores.h"
#include "smax/options.h"
#include "smax/tensor.h"

namespace smax::detail {

inline constexpr int kMaxRowwiseInputs = 3;
inline constexpr int kMaxRowwiseOutputs = 2;
inline constexpr int kMaxRowInputs = 2;
inline constexpr int kMaxRowOutputs = 3;

/// What a row function sees for one row: RowArgs (f32 arithmetic, every op)
/// or RowArgs64 (float64 arithmetic: Rowwise::run<double>, the ops that have
/// a float64 path for f64 logits).
template <class T>
struct RowArgsOf {
  using Value = T;  ///< the row's value type (generic row functions: decltype(a)::Value)
  int64_t row = 0;  ///< linear index of the row (row-major over src's non-axis dims)
  int64_t n = 0;    ///< row length (may be 0)
  const T* in[kMaxRowwiseInputs] = {};  ///< contiguous rows of n values
  T* out[kMaxRowwiseOutputs] = {};      ///< contiguous rows of n values, never aliasing in
  T row_in[kMaxRowInputs] = {};         ///< floating row inputs (i64 ones in row_index)
  int64_t row_index[kMaxRowInputs] = {};  ///< i64 row inputs (targets)
  T* row_out[kMaxRowOutputs] = {};      ///< one value each (nullptr if not declared)
  T* scratch = nullptr;                 ///< extra_scratch(n) values, uninitialised
  /// out[0] may be written with streaming stores: the op asked for them
  /// (Rowwise::set_stores) and out[0] is the output itself, not scratch.
  bool stream_out = false;
  /// s = scale / temperature: rounded to f32 (RowArgs), or
  /// double(scale) / double(temperature) (RowArgs64)
  T scale = 1;
  EmptyRow empty_row = EmptyRow::kZero;
};
using RowArgs = RowArgsOf<float>;
using RowArgs64 = RowArgsOf<double>;
/// The value type (float or double) of a generic row function's argument:
/// `using T = RowValue<decltype(a)>;`.
template <class Args>
using RowValue = typename std::decay_t<Args>::Value;
/// True for the float64 rows (RowArgs64) of a generic row function's
/// argument: `if constexpr (kIsF64Row<decltype(a)>)`.
template <class Args>
inline constexpr bool kIsF64Row = std::is_same_v<RowValue<Args>, double>;

class Rowwise {
 public:
  /// `op` names the op in errors; `src` is the first input (floating,
  /// defines the shape and axis); `src_is_logits` applies the logit
  /// transform to it.
  Rowwise(const char* op, const TensorView& src, const char* src_name, bool src_is_logits,
          const SoftmaxOptions& options);

  /// More same-shape floating inputs (e.g. y and dy in a backward pass).
  int add_input(const TensorView& view, const char* name, bool is_logits = false);
  /// A same-shape f32 input read as is except where the options' bool mask
  /// hides an entry, which reads -inf: an additive mask applied after a
  /// transform of the logits (cross_entropy's softcap), so that the bool
  /// mask wins over any value there (NaN included), as for plain logits.
  int add_bool_masked_input(const TensorView& view, const char* name);
  /// Same-shape floating output. Exact aliasing of an input is allowed when
  /// `allow_alias`; partial overlap never.
  int add_output(const TensorView& view, const char* name, bool allow_alias = true);
  /// Per-row input broadcast to the keepdim shape: `dtype` kF32 accepts any
  /// floating dtype (seen as f32 in RowArgs::row_in), kI64 only i64.
  int add_row_input(const TensorView& view, const char* name, DType dtype);
  /// Per-row floating output (keepdim or dropped shape).
  int add_row_output(const TensorView& view, const char* name);

  /// src's size along the resolved axis (1 for a scalar); valid before run().
  int64_t row_length() const { return src_.rank == 0 ? 1 : src_.shape[axis_]; }
  /// Geometry of the call; valid after finish().
  const Geometry& geometry() const { return g_; }
  int64_t rows() const { return g_.rows; }
  int64_t n() const { return g_.n; }
  int axis() const { return axis_; }
  const TensorView& src() const { return src_; }
  float scale() const { return scale_; }
  bool has_masks() const { return add_mask_ >= 0 || bool_mask_ >= 0; }

  /// True if some declared input (not a mask, not a row input) is f64: the
  /// ops with a float64 path then compute in float64 (run_native).
  bool any_input_f64() const {
    for (int i = 0; i < decls_; ++i) {
      if (decl_[i].kind == kInput && decl_[i].dtype == DType::kF64) return true;
    }
    return false;
  }

  /// For ops with a float64 path: runs fn, a generic lambda over RowArgs /
  /// RowArgs64, as run<double> when any_input_f64(), else as run<float>;
  /// `extra_bytes` of scratch per row (a.scratch holds at least that many
  /// bytes, in values of the row type).
  template <typename Fn>
  void run_native(int64_t extra_bytes, Fn&& fn) {
    if (any_input_f64()) {
      run<double>((extra_bytes + 7) / 8, fn);
    } else {
      run<float>((extra_bytes + 3) / 4, fn);
    }
  }

  /// How run() lets row functions store out[0] (core/stream_stores.h): the
  /// op's choose_stores(site, ...) for the call (kRegular unless set). With
  /// kMeasure each task runs its rows in two timed halves, one with
  /// RowArgs::stream_out and one without, reported for `site`; the op asks
  /// only where its row function does stream when told to, and the bits are
  /// the same.
  void set_stores(StoreSite site, StoreChoice choice) {
    store_site_ = site;
    stores_ = choice;
  }

  /// Runs fn(RowArgsOf<T>&) for every row, in parallel on the fixed task
  /// grid: T = float (RowArgs, f32 arithmetic) or double (RowArgs64).
  /// `extra_scratch` values per row are passed in RowArgs::scratch. Throws
  /// smax::Error (out of memory) before any write if scratch cannot be had.
  template <typename T = float, typename Fn>
  void run(int64_t extra_scratch, Fn&& fn) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "T: float or double");
    finish();
    if (g_.rows == 0) return;
    const int64_t n = g_.n;
    const int64_t per_row = (inputs_ + outputs_) * n + extra_scratch;
    const int64_t per_task = rows_per_task(n);
    const int64_t tasks = (g_.rows + per_task - 1) / per_task;
    const int buffers = static_cast<int>(std::min<int64_t>(std::max(threads_, 1), tasks));
    // The pool is sized in floats (raw bytes, aligned to 16); a double takes two.
    constexpr int64_t kFloatsPerValue = sizeof(T) / sizeof(float);
    ScratchPool pool(buffers, std::max<int64_t>(per_row * kFloatsPerValue, 1));
    for_each_row_task(g_, threads_, [&](int64_t begin, int64_t end) {
      ScratchPool::Lease lease(pool);
      T* buffer = lease.as<T>();
      auto rows = [&](int64_t first, int64_t count, bool stream) {
        for (int64_t row = begin + first; row < begin + first + count; ++row) {
          run_row<T>(row, buffer, fn, stream);
        }
      };
      run_with_stores(store_site_, stores_, end - begin, n, rows);
    });
  }

  /// run() restricted to the rows [row_begin, row_end) (clamped to rows()):
  /// the vocabulary-parallel ops process rows in chunks with a collective
  /// between two passes over a chunk. Each row gets exactly the same call as
  /// in run(), so a row's results do not depend on the chunking or on
  /// `threads`; tasks of rows_per_task(n) rows start at row_begin.
  template <typename T = float, typename Fn>
  void run_rows(int64_t row_begin, int64_t row_end, int64_t extra_scratch, Fn&& fn) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "T: float or double");
    finish();
    row_begin = std::max<int64_t>(row_begin, 0);
    row_end = std::min(row_end, g_.rows);
    if (row_end <= row_begin) return;
    const int64_t n = g_.n;
    const int64_t per_row = (inputs_ + outputs_) * n + extra_scratch;
    const int64_t per_task = rows_per_task(n);
    const int64_t tasks = (row_end - row_begin + per_task - 1) / per_task;
    const int buffers = static_cast<int>(std::min<int64_t>(std::max(threads_, 1), tasks));
    constexpr int64_t kFloatsPerValue = sizeof(T) / sizeof(float);
    ScratchPool pool(buffers, std::max<int64_t>(per_row * kFloatsPerValue, 1));
    run_parallel(tasks, threads_, [&](int64_t task) {
      ScratchPool::Lease lease(pool);
      T* buffer = lease.as<T>();
      const int64_t begin = row_begin + task * per_task;
      const int64_t end = std::min(row_end, begin + per_task);
      for (int64_t row = begin; row < end; ++row) run_row<T>(row, buffer, fn);
    });
  }

 private:
  void finish();
  enum Transform : uint8_t { kRaw, kLogits, kBoolMasked };
  void declare(int kind, const TensorView& view, const char* name, DType dtype, Transform transform,
               bool allow_alias);
  void gather_input(int k, const int64_t* off, float* dst_row) const;
  void gather_input(int k, const int64_t* off, double* dst_row) const;
  void zero_masked(const int64_t* off, float* out_row) const;
  void zero_masked(const int64_t* off, double* out_row) const;

  template <typename T, typename Fn>
  void run_row(int64_t row, T* buffer, Fn& fn, bool stream = false) const {
    constexpr bool kF64 = std::is_same_v<T, double>;
    constexpr DType kNative = kF64 ? DType::kF64 : DType::kF32;
    int64_t off[kMaxOperands];
    g_.row_offsets(row, off);
    const int64_t n = g_.n;
    RowArgsOf<T> a;
    a.row = row;
    a.n = n;
    a.scale = kF64 ? static_cast<T>(scale64_) : static_cast<T>(scale_);
    a.empty_row = empty_row_;
    T* next = buffer;
    // Rows of length 0 touch no element: their tensors may have null data,
    // so no address is formed from them (the row pointers point at scratch).
    const bool empty = n == 0;
    for (int k = 0; k < inputs_; ++k) {
      const int op = input_operand_[k];
      const bool direct = kF64 ? direct_input64_[k] : direct_input_[k];
      if (empty) {
        a.in[k] = buffer;
      } else if (direct) {
        a.in[k] = reinterpret_cast<const T*>(g_.at(op, off[op]));
      } else {
        gather_input(k, off, next);
        a.in[k] = next;
        next += n;
      }
    }
    void* scatter_to[kMaxRowwiseOutputs] = {};
    for (int k = 0; k < outputs_ && empty; ++k) a.out[k] = buffer;
    for (int k = 0; k < outputs_ && !empty; ++k) {
      const int op = output_operand_[k];
      auto* dst = reinterpret_cast<T*>(g_.at(op, off[op]));
      bool direct = output_dtype_[k] == kNative && (g_.axis_stride[op] == 1 || n <= 1);
      for (int i = 0; direct && i < inputs_; ++i) direct = a.in[i] != dst || n == 0;
      if (direct) {
        a.out[k] = dst;
      } else {
        a.out[k] = next;
        next += n;
      }
      scatter_to[k] = direct ? nullptr : dst;  // written through scratch
      if (k == 0) a.stream_out = stream && direct;
    }
    for (int k = 0; k < row_inputs_; ++k) {
      const int op = row_input_operand_[k];
      const char* p = g_.at(op, off[op]);
      if (row_input_dtype_[k] == DType::kI64) {
        std::memcpy(&a.row_index[k], p, sizeof(int64_t));
      } else if constexpr (kF64) {
        a.row_in[k] = load_f64(p, row_input_dtype_[k]);
      } else {
        a.row_in[k] = load_f32(p, row_input_dtype_[k]);
      }
    }
    // Row outputs not of the native dtype are written by fn into a local
    // value and rounded to their dtype afterwards.
    T row_out_local[kMaxRowOutputs] = {};
    for (int k = 0; k < row_outputs_; ++k) {
      const int op = row_output_operand_[k];
      a.row_out[k] = row_output_dtype_[k] == kNative ? reinterpret_cast<T*>(g_.at(op, off[op]))
                                                    : &row_out_local[k];
    }
    a.scratch = next;
    fn(a);
    for (int k = 0; k < row_outputs_; ++k) {
      const int op = row_output_operand_[k];
      if (row_output_dtype_[k] == kNative) continue;
      if constexpr (kF64) {
        store_f64(g_.at(op, off[op]), row_output_dtype_[k], row_out_local[k]);
      } else {
        store_f32(g_.at(op, off[op]), row_output_dtype_[k], row_out_local[k]);
      }
    }
    for (int k = 0; k < outputs_ && !empty; ++k) {
      const int op = output_operand_[k];
      if (zero_masked_outputs_) zero_masked(off, a.out[k]);
      if (scatter_to[k] == nullptr) continue;
      if constexpr (kF64) {
        scatter_row_f64(a.out[k], n, scatter_to[k], output_dtype_[k], g_.axis_stride[op]);
      } else {
        scatter_row_f32(a.out[k], n, scatter_to[k], output_dtype_[k], g_.axis_stride[op]);
      }
    }
  }

  enum Kind { kInput, kOutput, kRowInput, kRowOutput };
  const char* op_;
  TensorView src_;
  int axis_ = 0;
  float scale_ = 1.0f;
  double scale64_ = 1.0;  // double(scale) / double(temperature): run<double>'s s
  EmptyRow empty_row_ = EmptyRow::kZero;
  int threads_ = 1;
  bool finished_ = false;
  bool zero_masked_outputs_ = false;
  StoreChoice stores_ = StoreChoice::kRegular;
  StoreSite store_site_ = StoreSite::kCrossEntropy;  // meaningful only with stores_ set

  // Declared operands, in declaration order (views kept for overlap checks).
  struct Decl {
    Kind kind;
    TensorView view;
    const char* name;
    DType dtype;
    Transform transform;
    bool allow_alias;
  };
  Decl decl_[kMaxOperands];
  int decls_ = 0;
  const TensorView* add_mask_view_ = nullptr;
  const TensorView* bool_mask_view_ = nullptr;
  TensorView add_mask_copy_, bool_mask_copy_;

  Geometry g_;
  int inputs_ = 0, outputs_ = 0, row_inputs_ = 0, row_outputs_ = 0;
  int input_operand_[kMaxRowwiseInputs] = {};
  Transform input_transform_[kMaxRowwiseInputs] = {};
  bool direct_input_[kMaxRowwiseInputs] = {};    // run(): read in place (f32, as is)
  bool direct_input64_[kMaxRowwiseInputs] = {};  // run<double>(): read in place (f64, as is)
  DType input_dtype_[kMaxRowwiseInputs] = {};
  int output_operand_[kMaxRowwiseOutputs] = {};
  DType output_dtype_[kMaxRowwiseOutputs] = {};
  int row_input_operand_[kMaxRowInputs] = {};
  DType row_input_dtype_[kMaxRowInputs] = {};
  int row_output_operand_[kMaxRowOutputs] = {};
  DType row_output_dtype_[kMaxRowOutputs] = {};
  int add_mask_ = -1, bool_mask_ = -1;
  DType add_mask_dtype_ = DType::kF32;

 public:
  /// Backward passes whose inputs are not logits: zero every output element
  /// whose logit is masked (bool mask 0 or additive mask -inf), so masked
  /// entries get exactly no gradient whatever the row function wrote there.
  void zero_masked_outputs() { zero_masked_outputs_ = true; }
};

/// A Rowwise with the usual forward operands, declared (and so validated)
/// in this order: src (the logits, a.in[0], named "src") and dst (a.out[0],
/// named "dst", exact aliasing of src allowed).
class ForwardRowwise : public Rowwise {
 public:
  ForwardRowwise(const char* op, const TensorView& src, const TensorView& dst,
                 const SoftmaxOptions& options)
      : Rowwise(op, src, "src", /*src_is_logits=*/true, options) {
    add_output(dst, "dst");
  }
};

/// A Rowwise with the usual backward operands, declared (and so validated)
/// in this order: `first` (a.in[0], named `first_name`: the logits when
/// `first_is_logits`, else a saved output such as y), dy (a.in[1], "dy")
/// and dsrc (a.out[0], "dsrc", exact aliasing of an input allowed).
class BackwardRowwise : public Rowwise {
 public:
  BackwardRowwise(const char* op, const TensorView& first, const char* first_name,
                  bool first_is_logits, const TensorView& dy, const TensorView& dsrc,
                  const SoftmaxOptions& options)
      : Rowwise(op, first, first_name, first_is_logits, options) {
    add_input(dy, "dy");
    add_output(dsrc, "dsrc");
  }
};

}  // namespace smax::detail
