// src/core/rowwise.cc: validation and geometry of Rowwise (see rowwise.h).
#include "core/rowwise.h"

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "core/errors.h"
#include "core/internal.h"
#include "core/validate.h"
#include "smax/error.h"
#include "smax/runtime.h"

namespace smax::detail {
Rowwise::Rowwise(const char* op, const TensorView& src, const char* src_name, bool src_is_logits,
                 const SoftmaxOptions& options)
    : op_(op) {
  ensure_runtime_initialized();
  check_float_view(src, op, src_name);
  scale_ = check_options(options, op);
  scale64_ = static_cast<double>(options.scale) / static_cast<double>(options.temperature);
  src_ = as_rank1_if_scalar(src);
  axis_ = resolve_axis(options.axis, src.rank, op);
  empty_row_ = options.empty_row;
  threads_ = options.threads > 0 ? options.threads : max_threads();
  if (options.additive_mask) {
    check_float_view(*options.additive_mask, op, "additive_mask");
    add_mask_copy_ = *options.additive_mask;
    add_mask_view_ = &add_mask_copy_;
  }
  if (options.bool_mask) {
    check_view(*options.bool_mask, op, "bool_mask", DType::kBool);
    bool_mask_copy_ = *options.bool_mask;
    bool_mask_view_ = &bool_mask_copy_;
  }
  declare(kInput, src_, src_name, src.dtype, src_is_logits ? kLogits : kRaw, false);
}

void Rowwise::declare(int kind, const TensorView& view, const char* name, DType dtype,
                      Transform transform, bool allow_alias) {
  if (finished_) fail(op_, "internal: operand declared after run");
  if (decls_ >= kMaxOperands - 2) fail(op_, "internal: too many operands");
  decl_[decls_++] = Decl{static_cast<Kind>(kind), view, name, dtype, transform, allow_alias};
}

int Rowwise::add_input(const TensorView& view, const char* name, bool is_logits) {
  check_float_view(view, op_, name);
  const TensorView v = as_rank1_if_scalar(view);
  check_same_shape(src_, decl_[0].name, v, name, op_);
  declare(kInput, v, name, view.dtype, is_logits ? kLogits : kRaw, false);
  return 0;
}

int Rowwise::add_bool_masked_input(const TensorView& view, const char* name) {
  check_float_view(view, op_, name);
  const TensorView v = as_rank1_if_scalar(view);
  check_same_shape(src_, decl_[0].name, v, name, op_);
  declare(kInput, v, name, view.dtype, kBoolMasked, false);
  return 0;
}

int Rowwise::add_output(const TensorView& view, const char* name, bool allow_alias) {
  check_float_view(view, op_, name);
  const TensorView v = as_rank1_if_scalar(view);
  check_same_shape(src_, decl_[0].name, v, name, op_);
  check_no_self_overlap(view, name, op_);
  declare(kOutput, v, name, view.dtype, kRaw, allow_alias);
  return 0;
}

int Rowwise::add_row_input(const TensorView& view, const char* name, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kI64) fail(op_, "internal: row input dtype");
  if (dtype == DType::kF32) {
    check_float_view(view, op_, name);
  } else {
    check_view(view, op_, name, dtype);
  }
  declare(kRowInput, view, name, view.dtype, kRaw, false);
  return 0;
}

int Rowwise::add_row_output(const TensorView& view, const char* name) {
  check_float_view(view, op_, name);
  check_no_self_overlap(view, name, op_);
  declare(kRowOutput, view, name, view.dtype, kRaw, false);
  return 0;
}

void Rowwise::finish() {
  if (finished_) return;
  int64_t strides[kMaxOperands][kMaxRank] = {};
  char* bases[kMaxOperands] = {};
  int sizes[kMaxOperands] = {};
  TensorView keepdim = src_;
  keepdim.shape[axis_] = 1;
  int count = 0;
  for (int i = 0; i < decls_; ++i) {
    const Decl& d = decl_[i];
    const int k = count++;
    bases[k] = static_cast<char*>(d.view.data);
    sizes[k] = dtype_size(d.dtype);
    switch (d.kind) {
      case kInput:
      case kOutput:
        for (int a = 0; a < src_.rank; ++a) strides[k][a] = d.view.strides[a];
        if (d.kind == kInput) {
          if (inputs_ >= kMaxRowwiseInputs) fail(op_, "internal: too many inputs");
          input_transform_[inputs_] = d.transform;
          input_dtype_[inputs_] = d.dtype;
          input_operand_[inputs_++] = k;
        } else {
          if (outputs_ >= kMaxRowwiseOutputs) fail(op_, "internal: too many outputs");
          output_dtype_[outputs_] = d.dtype;
          output_operand_[outputs_++] = k;
        }
        break;
      case kRowInput:
        if (row_inputs_ >= kMaxRowInputs) fail(op_, "internal: too many row inputs");
        broadcast_strides(d.view, d.name, keepdim, op_, strides[k]);
        strides[k][axis_] = 0;
        row_input_dtype_[row_inputs_] = d.dtype;
        row_input_operand_[row_inputs_++] = k;
        break;
      case kRowOutput:
        if (row_outputs_ >= kMaxRowOutputs) fail(op_, "internal: too many row outputs");
        reduced_strides(src_, axis_, d.view, d.name, op_, strides[k]);
        row_output_dtype_[row_outputs_] = d.dtype;
        row_output_operand_[row_outputs_++] = k;
        break;
    }
  }
  if (add_mask_view_ != nullptr) {
    add_mask_ = count++;
    bases[add_mask_] = static_cast<char*>(add_mask_view_->data);
    add_mask_dtype_ = add_mask_view_->dtype;
    sizes[add_mask_] = dtype_size(add_mask_dtype_);
    broadcast_strides(*add_mask_view_, "additive_mask", src_, op_, strides[add_mask_]);
  }
  if (bool_mask_view_ != nullptr) {
    bool_mask_ = count++;
    bases[bool_mask_] = static_cast<char*>(bool_mask_view_->data);
    sizes[bool_mask_] = 1;
    broadcast_strides(*bool_mask_view_, "bool_mask", src_, op_, strides[bool_mask_]);
  }
  // Outputs must not overlap anything they do not exactly alias.
  for (int i = 0; i < decls_; ++i) {
    const Decl& out = decl_[i];
    if (out.kind != kOutput && out.kind != kRowOutput) continue;
    for (int j = 0; j < decls_; ++j) {
      if (j == i) continue;
      const Decl& other = decl_[j];
      const bool other_is_output = other.kind == kOutput || other.kind == kRowOutput;
      if (other_is_output && j < i) continue;  // the pair was checked already
      const bool alias_ok = out.kind == kOutput && other.kind == kInput && out.allow_alias;
      check_disjoint_or_same(out.view, out.name, other.view, other.name, op_, alias_ok);
    }
    if (add_mask_view_) {
      check_disjoint_or_same(out.view, out.name, *add_mask_view_, "additive_mask", op_, false);
    }
    if (bool_mask_view_) {
      check_disjoint_or_same(out.view, out.name, *bool_mask_view_, "bool_mask", op_, false);
    }
  }
  g_ = make_geometry(src_, axis_, count, bases, sizes, strides);
  const bool transform = scale_ != 1.0f || has_masks();
  for (int k = 0; k < inputs_; ++k) {
    const bool contiguous = g_.axis_stride[input_operand_[k]] == 1 || g_.n <= 1;
    const bool changed = (input_transform_[k] == kLogits && transform) ||
                         (input_transform_[k] == kBoolMasked && bool_mask_view_ != nullptr);
    direct_input_[k] = contiguous && !changed && input_dtype_[k] == DType::kF32;
    // run<double>() transforms logits by scale64_ (not the f32 scale_).
    const bool changed64 = (input_transform_[k] == kLogits && (scale64_ != 1.0 || has_masks())) ||
                           (input_transform_[k] == kBoolMasked && bool_mask_view_ != nullptr);
    direct_input64_[k] = contiguous && !changed64 && input_dtype_[k] == DType::kF64;
  }
  finished_ = true;
}

void Rowwise::gather_input(int k, const int64_t* off, float* t) const {
  const int op = input_operand_[k];
  const int64_t n = g_.n;
  gather_row_f32(g_.at(op, off[op]), input_dtype_[k], g_.axis_stride[op], n, t);
  const auto* keep = bool_mask_ >= 0
                         ? reinterpret_cast<const uint8_t*>(g_.at(bool_mask_, off[bool_mask_]))
                         : nullptr;
  const int64_t sb = bool_mask_ >= 0 ? g_.axis_stride[bool_mask_] : 0;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (input_transform_[k] != kLogits) {
    if (input_transform_[k] == kBoolMasked && keep) {
      for (int64_t i = 0; i < n; ++i) {
        if (keep[i * sb] == 0) t[i] = neg_inf;
      }
    }
    return;
  }
  // t = fl(fl(x * s) + mask), -inf where the bool mask is 0 (x already f32),
  // one simple loop per step so that each vectorises.
  const float s = scale_;
  if (s != 1.0f) {
    for (int64_t i = 0; i < n; ++i) t[i] = t[i] * s;
  }
  if (add_mask_ >= 0) {
    const char* add = g_.at(add_mask_, off[add_mask_]);
    const int64_t sa = g_.axis_stride[add_mask_];
    if (add_mask_dtype_ == DType::kF32) {
      const auto* a = reinterpret_cast<const float*>(add);
      for (int64_t i = 0; i < n; ++i) t[i] = t[i] + a[i * sa];
    } else {
      const int64_t add_bytes = dtype_size(add_mask_dtype_) * sa;
      for (int64_t i = 0; i < n; ++i) t[i] = t[i] + load_f32(add + i * add_bytes, add_mask_dtype_);
    }
  }
  if (keep) {
    for (int64_t i = 0; i < n; ++i) {
      if (keep[i * sb] == 0) t[i] = neg_inf;
    }
  }
}

// The float64 form: x widened exactly, t = x * s + mask in double with
// s = double(scale) / double(temperature).
void Rowwise::gather_input(int k, const int64_t* off, double* t) const {
  const int op = input_operand_[k];
  const int64_t n = g_.n;
  gather_row_f64(g_.at(op, off[op]), input_dtype_[k], g_.axis_stride[op], n, t);
  const auto* keep = bool_mask_ >= 0
                         ? reinterpret_cast<const uint8_t*>(g_.at(bool_mask_, off[bool_mask_]))
                         : nullptr;
  const int64_t sb = bool_mask_ >= 0 ? g_.axis_stride[bool_mask_] : 0;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const bool logits = input_transform_[k] == kLogits;
  if (logits && scale64_ != 1.0) {
    for (int64_t i = 0; i < n; ++i) t[i] = t[i] * scale64_;
  }
  if (logits && add_mask_ >= 0) {
    const char* add = g_.at(add_mask_, off[add_mask_]);
    const int64_t add_bytes = dtype_size(add_mask_dtype_) * g_.axis_stride[add_mask_];
    for (int64_t i = 0; i < n; ++i) t[i] = t[i] + load_f64(add + i * add_bytes, add_mask_dtype_);
  }
  if (keep && input_transform_[k] != kRaw) {
    for (int64_t i = 0; i < n; ++i) {
      if (keep[i * sb] == 0) t[i] = neg_inf;
    }
  }
}

// out_row[i] = 0 where the row at `off` is masked: bool mask 0, or an
// additive mask of -inf as T reads it (an f64 -1e300 is -inf in f32).
template <class T>
static void zero_masked_row(const Geometry& g, int add_mask, DType add_dtype, int bool_mask,
                            const int64_t* off, T* out_row) {
  const char* add = add_mask >= 0 ? g.at(add_mask, off[add_mask]) : nullptr;
  const auto* keep =
      bool_mask >= 0 ? reinterpret_cast<const uint8_t*>(g.at(bool_mask, off[bool_mask])) : nullptr;
  if (!add && !keep) return;
  const int64_t add_bytes = add_mask >= 0 ? dtype_size(add_dtype) * g.axis_stride[add_mask] : 0;
  const int64_t sb = bool_mask >= 0 ? g.axis_stride[bool_mask] : 0;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < g.n; ++i) {
    const double a = !add                          ? 0.0
                     : std::is_same_v<T, float> ? load_f32(add + i * add_bytes, add_dtype)
                                                : load_f64(add + i * add_bytes, add_dtype);
    if ((add && a == neg_inf) ||
        (keep && keep[i * sb] == 0)) {
      out_row[i] = 0;
    }
  }
}

void Rowwise::zero_masked(const int64_t* off, double* out_row) const {
  zero_masked_row(g_, add_mask_, add_mask_dtype_, bool_mask_, off, out_row);
}

void Rowwise::zero_masked(const int64_t* off, float* out_row) const {
  zero_masked_row(g_, add_mask_, add_mask_dtype_, bool_mask_, off, out_row);
}

}  // namespace smax::detail
