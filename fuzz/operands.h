// fuzz/operands.h: the input reader and the operand arithmetic that every
// fuzz harness shares (harness.cc, harness_ops/, harness_attention/): the
// byte reader of an input, element counts, the element offsets and the
// reachable span of a strided view, and the overlap / aliasing predicates of
// two views in one arena.
//
// Everything here is pure arithmetic on shapes and strides (in elements);
// what a harness adds (arena kinds, corrupted views) stays in the harness.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "smax/tensor.h"

namespace smax_fuzz {

/// Reads a fuzz input in order; past its end every read returns 0, so any
/// input decodes (little-endian multi-byte values).
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint8_t u8() { return i_ < n_ ? p_[i_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return static_cast<uint32_t>(u16()) | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return static_cast<uint64_t>(u32()) | (static_cast<uint64_t>(u32()) << 32); }
  /// Bytes left to read.
  bool left() const { return i_ < n_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t i_ = 0;
};

/// The float with bit pattern `b`.
float bits_to_float(uint32_t b);

/// Upstream gradients: bounded so that no f32 intermediate can overflow
/// where float64 does not (|dy| <= 2^15 * 1e3), rarely NaN / inf.
float gradient(Reader& r);

/// The special logits both harnesses draw, by `kase` in 0..9 (k: the byte
/// that picked it): NaN, +inf, -inf (twice), a denormal, a huge value, any
/// bit pattern, a signed zero, 90..100 (a naive exp overflows), a wide value.
float special_logit(unsigned kase, uint8_t k, Reader& r);

// Stride patterns the harnesses draw (each reads its bytes from `r`):
/// A permuted memory order with a padding of 0..2 elements between dims.
void permuted_padded_strides(const std::vector<int64_t>& shape, Reader& r,
                             std::vector<int64_t>& strides);
/// Negates the strides of the dims whose bit is set in the next byte.
void negate_some_strides(Reader& r, std::vector<int64_t>& strides);
/// Zeroes (broadcasts) the strides of the dims whose bit is set in the next byte.
void zero_some_strides(Reader& r, std::vector<int64_t>& strides);

/// One strided view in an arena: its shape, its strides (in elements) and the
/// arena element its index 0 sits on.
struct Layout {
  std::vector<int64_t> shape, strides;
  int64_t origin = 0;
};

/// A Layout as the harnesses hand it to the library, possibly corrupted.
struct FuzzView : Layout {
  int rank_override = -1000;   ///< corrupted rank, or -1000
  bool null_data = false;
  bool wrong_dtype = false;
  bool unallocatable = false;  ///< corrupted strides: never dereference
};

/// The TensorView of `o` (its shape, strides and rank, the rank corrupted
/// when asked) with `dtype` and `data` (nullptr when o.null_data).
smax::TensorView tensor_view(const FuzzView& o, smax::DType dtype, void* data);

/// Elements of `shape`: 0 with any zero dim, -1 with a negative dim or when
/// the product overflows int64.
int64_t numel_of(const std::vector<int64_t>& shape);
/// Contiguous row-major strides of `shape` (dims of size 0 count as 1).
std::vector<int64_t> row_major(const std::vector<int64_t>& shape);
/// [lo, hi]: the element offsets (relative to index 0) the view reaches
/// (numel > 0).
void span_of(const Layout& o, int64_t* lo, int64_t* hi);
/// Element offsets (relative to index 0) in row-major logical order; empty
/// when the view has no elements.
std::vector<int64_t> offsets_of(const Layout& o);
/// The view's byte offsets overflow int64 with `esize`-byte elements (exact,
/// in 128 bits).
bool bytes_overflow(const Layout& o, int esize);
/// Two of `offs` are equal.
bool has_duplicates(std::vector<int64_t> offs);
/// The library's documented output rule: sorted by |stride|, every stride
/// exceeds the extent of the smaller dims (so no two indices meet).
bool output_layout_ok(const Layout& o);
/// The two views (in one arena) have an element in common.
bool share_element(const Layout& a, const Layout& b);
/// The address intervals of the two views (in one arena) overlap (both
/// non-empty).
bool ranges_overlap(const Layout& a, const Layout& b);
/// The same view: same origin and shape, same strides on every dim > 1.
bool same_view(const Layout& a, const Layout& b);
/// " shape [..] strides [..] origin N" and the corruptions of a view, for
/// a case's description.
void describe_view(std::ostream& os, const FuzzView& o);

/// The first failed element of a check, and how many failed.
struct FailureLog {
  std::string first;
  long long failures = 0;
  void fail(size_t i, double out, double ref, double bound, const char* what);
};

/// `mask` broadcasts to `target` (right-aligned, dims equal or 1).
bool broadcastable(const std::vector<int64_t>& mask, const std::vector<int64_t>& target);

}  // namespace smax_fuzz
