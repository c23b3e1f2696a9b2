// fuzz/harness_attention_inputs.cc: input values, the guarded strided
// buffers and the rows whose f32 evaluation may overflow (part of the
// attention harness, harness_attention.h; what the parts share:
// harness_attention_internal.h).
#include "harness_attention_internal.h"

namespace smax_fuzz {
namespace attention_internal {

// Values: mostly ordinary, sometimes special (`special` = 0..255: higher =
// more specials).
float value(Reader& r, uint8_t special) {
  const uint8_t k = r.u8();
  if (k >= special) return static_cast<float>(static_cast<int8_t>(r.u8())) / 32.0f;
  switch (k % 10) {
    case 0: return kNaN;
    case 1: return kInf;
    case 2: return -kInf;
    case 3: return bits_to_float((r.u32() & 0x807fffffu) | 1u);  // denormal
    case 4: {
      const float huge[] = {1e30f, -1e30f, FLT_MAX, -FLT_MAX, 1e20f, -3e38f, 1e10f, -1e15f};
      return huge[r.u8() % 8];
    }
    case 5: return bits_to_float(r.u32());
    case 6: return (k & 0x20) ? -0.0f : 0.0f;
    case 7: return 60.0f + static_cast<float>(r.u8()) / 4.0f;
    default: return static_cast<float>(static_cast<int16_t>(r.u16())) / 64.0f;
  }
}

// v values: specials that keep the oracle comparable (denormals, signed
// zeros, large but not overflowing), and NaN / +-inf only when `nonfinite`
// (the oracle skips zero weights, SGEMM computes 0 * NaN: such calls are
// checked for guards and determinism only).
float value_v(Reader& r, uint8_t special, bool nonfinite) {
  const uint8_t k = r.u8();
  if (k >= special) return static_cast<float>(static_cast<int8_t>(r.u8())) / 32.0f;
  switch (k % 5) {
    case 0: return bits_to_float((r.u32() & 0x807fffffu) | 1u);
    case 1: return (k & 0x20) ? -0.0f : 0.0f;
    case 2: return (k & 0x40) ? 1e6f : -3e5f;
    case 3: return nonfinite ? ((k & 0x20) ? kNaN : ((k & 0x40) ? kInf : -kInf)) : 1e-30f;
    default: return static_cast<float>(static_cast<int16_t>(r.u16())) / 64.0f;
  }
}

// Layout codes: 0 row-major, 1 [B, L, H, D] transposed, 2 padded, 3 negative
// stride on one dim, 4 random permutation + padding, 5 last-dim stride 2.
void make_buf(Buf& b, const std::vector<int64_t>& shape, DType dtype, int code, Reader& r) {
  const int rank = static_cast<int>(shape.size());
  b.esize = dtype == DType::kBool ? 1 : dtype == DType::kI64 ? 8 : 4;
  std::vector<int> perm(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) perm[i] = i;
  std::vector<int64_t> pad(static_cast<size_t>(rank), 0);
  int neg = -1;
  int64_t inner = 1;
  switch (code) {
    case 1:
      if (rank == 4) std::swap(perm[1], perm[2]);
      break;
    case 2:
      for (int i = 0; i < rank; ++i) pad[i] = r.u8() % 3;
      break;
    case 3:
      if (rank > 0) neg = r.u8() % rank;
      break;
    case 4:
      for (int i = rank - 1; i > 0; --i) std::swap(perm[i], perm[r.u8() % (i + 1)]);
      for (int i = 0; i < rank; ++i) pad[i] = r.u8() % 2;
      break;
    case 5:
      inner = 2;
      break;
    default:
      break;
  }
  b.view = TensorView{};
  b.view.dtype = dtype;
  b.view.rank = rank;
  int64_t stride = inner;
  for (int k = rank - 1; k >= 0; --k) {
    const int d = perm[k];
    b.view.shape[d] = shape[d];
    b.view.strides[d] = stride;
    stride = stride * std::max<int64_t>(shape[d], 1) + pad[d];
  }
  int64_t numel = 1;
  for (int d = 0; d < rank; ++d) numel *= shape[d];
  int64_t lo = 0, hi = 0;  // element offsets relative to data
  if (numel > 0) {
    for (int d = 0; d < rank; ++d) hi += (shape[d] - 1) * b.view.strides[d];
  }
  int64_t base = 0;
  if (neg >= 0 && shape[neg] > 1) {
    base = (shape[neg] - 1) * b.view.strides[neg];
    b.view.strides[neg] = -b.view.strides[neg];
    lo = 0;
  }
  const int64_t span = numel > 0 ? hi - lo + 1 : 0;
  const int64_t slots = span + 2 * kGuard;
  b.bytes.assign(static_cast<size_t>(slots * b.esize), kSentinelByte);
  b.is_elem.assign(static_cast<size_t>(slots), 0);
  b.view.data = b.bytes.data() + (kGuard + base) * b.esize;
  // Mark element slots.
  if (numel > 0) {
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    for (int64_t e = 0; e < numel; ++e) {
      int64_t off = kGuard + base;
      for (int d = 0; d < rank; ++d) off += idx[d] * b.view.strides[d];
      b.is_elem[static_cast<size_t>(off)] = 1;
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  static const char* const kNames[] = {"row-major", "transposed", "padded",
                                       "negative",  "permuted",   "stride2"};
  b.layout = kNames[code % 6];
}

float* fslot(Buf& b, int64_t off) { return reinterpret_cast<float*>(b.bytes.data()) + off; }

float fget(const Buf& b, int64_t off) {
  float f;
  std::memcpy(&f, b.bytes.data() + off * 4, 4);
  return f;
}

std::vector<float> dense(const Buf& b) {
  std::vector<float> out;
  for_each_elem(b, [&](int64_t, int64_t off) { out.push_back(fget(b, off)); });
  return out;
}

bool same_special(double got, double want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return want == got;
  return true;
}

// Rows whose f32 evaluation may overflow where float64 does not.
std::vector<char> risky_rows(const ref::AttentionProblem& p, const ref::AttentionResult& r,
                             bool v_nonfinite, double vmax) {
  const int64_t rows = p.B * p.H * p.Lq;
  std::vector<char> risky(static_cast<size_t>(rows), 0);
  for (int64_t row = 0; row < rows; ++row) {
    double dmax = 0;
    ref::attention_row_delta(p, r, row, &dmax);
    bool bad = v_nonfinite || dmax * std::max(1.0, std::abs(p.scale)) > kOverflowRisk ||
               vmax * static_cast<double>(p.Lk + 1) > kOverflowRisk;
    for (int64_t j = 0; j < p.Lk && !bad; ++j) {
      const double t = r.T[static_cast<size_t>(row * p.Lk + j)];
      if (std::isfinite(t) && std::abs(t) > 1e30) bad = true;
    }
    if (!p.add.empty()) {
      for (int64_t j = 0; j < p.Lk && !bad; ++j) {
        const double a = p.add[static_cast<size_t>(row * p.Lk + j)];
        if (std::isfinite(a) && std::abs(a) > 1e30) bad = true;
      }
    }
    if (!p.alibi.empty()) {
      const double s = std::abs(p.alibi[static_cast<size_t>(row / p.Lq)]);
      if (std::isfinite(s) && s * static_cast<double>(std::max(p.Lq, p.Lk)) > 1e30) bad = true;
    }
    if (!p.sinks.empty()) {
      const double s = p.sinks[static_cast<size_t>((row / p.Lq) % p.H)];
      if (std::isfinite(s) && std::abs(s) > 1e30) bad = true;
    }
    risky[static_cast<size_t>(row)] = bad;
  }
  return risky;
}

}  // namespace attention_internal
}  // namespace smax_fuzz
