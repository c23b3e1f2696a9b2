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
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <ostream>
#include <string>
#include <vector>

#include "smax/c/smax.h"
#include "smax/error.h"
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

/// The constants of a harness's stride draw (decode_strides).
struct StrideModes {
  int modes;         ///< the mode byte is taken modulo this
  int small;         ///< mode 5: each stride int8 % small
  int step_min;      ///< mode 7: the step is step_min + byte % step_choices
  int step_choices;
};
/// Strides of `shape`, by the next byte modulo m.modes: 3 permuted and
/// padded, 4 some negated, 5 arbitrary small ones (zero, negative,
/// overlapping), 6 some zero (broadcast), 7 row-major spaced by a step;
/// any other mode row-major.
std::vector<int64_t> decode_strides(const std::vector<int64_t>& shape, Reader& r,
                                    const StrideModes& m);

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

/// Storage dtypes of a case, drawn from byte `b` (the harnesses' last byte):
/// none when bit 7 is clear (f32 / f32), else inputs and outputs each one of
/// f64, f16, bf16, f32 (bits 0-1 and 2-3).
struct StorageDraw {
  smax::DType in = smax::DType::kF32, out = smax::DType::kF32;
  bool typed() const { return in != smax::DType::kF32 || out != smax::DType::kF32; }
};
StorageDraw draw_storage(uint8_t b);
/// The typed arenas of a draw over a harness's f32 arena: the inputs'
/// values rounded to `in` in `arena` itself (what the oracle then reads)
/// and stored as `in` in typed_in; typed_out holds the arena's values (the
/// outputs' sentinels) as `out`.
void make_typed_arenas(std::vector<float>& arena, const StorageDraw& d,
                       std::vector<unsigned char>* typed_in, std::vector<unsigned char>* typed_out);

/// `v` rounded to dtype `d` (to nearest even; f16 / bf16 through f32, so
/// a double rounding is possible: a pass shortcut only, the bounds carry
/// half an ulp; f64 and NaN as is).
double storage_round(smax::DType d, double v);
/// The elements of view `o` (row-major logical order) in a typed arena
/// (`arena_elems` elements of dtype `d` mirroring a harness's f32 arena),
/// widened exactly to double.
std::vector<double> dense_in_arena(const Layout& o, const std::vector<unsigned char>& arena,
                                   smax::DType d, size_t arena_elems);

/// The TensorView of `o` (its shape, strides and rank, the rank corrupted
/// when asked) with `dtype` and `data` (nullptr when o.null_data).
smax::TensorView tensor_view(const FuzzView& o, smax::DType dtype, void* data);

/// The C ABI's smax_tensor of a view: smax_cli::c_tensor (testing/op_table.h).
/// Elements of `shape`: 0 with any zero dim, -1 with a negative dim or when
/// the product overflows int64.
int64_t numel_of(const std::vector<int64_t>& shape);
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

/// Parses a name among `all` (name_of(x) each): true and *out = the value
/// so named, or false.
template <class T, class NameOf>
bool parse_name(const std::string& name, const std::vector<T>& all, NameOf name_of, T* out) {
  for (T x : all) {
    if (name == name_of(x)) {
      *out = x;
      return true;
    }
  }
  return false;
}

/// What parse(name, ...) gives for the name a fuzz target was compiled with
/// (the macro `macro`); prints "unknown <macro> <name>" and aborts when
/// parse fails.
template <class T>
T parse_or_abort(bool (*parse)(const std::string&, T*), const char* name, const char* macro) {
  T x;
  if (!parse(name, &x)) {
    std::fprintf(stderr, "unknown %s %s\n", macro, name);
    std::abort();
  }
  return x;
}

/// One C++ call of an op under the contract's rules for errors: runs call();
/// returns "" when it returns, the message when it throws smax::Error with
/// the status kInvalidArgument and a message that names_op(message). Any
/// other outcome is reported through fail(what), which must not return (the
/// harness's violation). *ok: whether the call returned.
template <class Call, class NamesOp, class Fail>
std::string checked_call(const Call& call, const NamesOp& names_op, const Fail& fail, bool* ok) {
  *ok = false;
  try {
    call();
  } catch (const smax::Error& e) {
    const std::string msg = e.what();
    if (e.status() != smax::Status::kInvalidArgument) {
      fail(std::string("smax::Error with status ") + smax::status_name(e.status()) + ": " + msg);
    }
    if (!names_op(msg)) fail("error message does not name the op: " + msg);
    return msg;
  } catch (const std::exception& e) {
    fail(std::string("a non-smax exception escaped: ") + e.what());
  } catch (...) {
    fail("an unknown exception escaped");
  }
  *ok = true;
  return "";
}

}  // namespace smax_fuzz
