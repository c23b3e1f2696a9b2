// fuzz/operands.cc: see operands.h.
#include "operands.h"

#include "check.h"
#include "typed_call.h"

#include <algorithm>
#include <cmath>
#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

namespace smax_fuzz {

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

float gradient(Reader& r) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  const uint8_t k = r.u8();
  switch (k % 32) {
    case 0: return kNaN;
    case 1: return (k & 0x20) ? kInf : -kInf;
    case 2: return bits_to_float((r.u32() & 0x807fffffu) | 1u);
    case 3: return static_cast<float>(static_cast<int16_t>(r.u16())) * 1000.0f;
    case 4: return 0.0f;
    default: return static_cast<float>(static_cast<int16_t>(r.u16())) / 4096.0f;
  }
}

float special_logit(unsigned kase, uint8_t k, Reader& r) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  switch (kase) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return kInf;
    case 2:
    case 3: return -kInf;
    case 4: return bits_to_float((r.u32() & 0x807fffffu) | 1u);  // denormal
    case 5: {
      const float huge[] = {1e30f, -1e30f, FLT_MAX, -FLT_MAX, 1e38f, -3e38f, 8e37f, -1e20f};
      return huge[r.u8() % 8];
    }
    case 6: return bits_to_float(r.u32());  // any pattern (NaN payloads, inf, ...)
    case 7: return (k & 0x20) ? -0.0f : 0.0f;
    case 8: return 90.0f + static_cast<float>(r.u8()) / 25.6f;  // naive exp overflows
    default: return static_cast<float>(static_cast<int16_t>(r.u16())) / 8.0f;  // 9: wide
  }
}

void permuted_padded_strides(const std::vector<int64_t>& shape, Reader& r,
                             std::vector<int64_t>& st) {
  const size_t rank = shape.size();
  std::vector<size_t> order(rank);
  for (size_t i = 0; i < rank; ++i) order[i] = i;
  for (size_t i = rank; i > 1; --i) std::swap(order[i - 1], order[r.u8() % i]);
  const int64_t pad = r.u8() % 3;
  int64_t s = 1;
  for (size_t i = rank; i-- > 0;) {
    st[order[i]] = s;
    s *= std::max<int64_t>(shape[order[i]], 1) + (i + 1 < rank ? pad : 0);
  }
}

void negate_some_strides(Reader& r, std::vector<int64_t>& st) {
  const uint8_t m = r.u8();
  for (size_t d = 0; d < st.size(); ++d) {
    if (m & (1u << d)) st[d] = -st[d];
  }
}

void zero_some_strides(Reader& r, std::vector<int64_t>& st) {
  const uint8_t m = r.u8();
  for (size_t d = 0; d < st.size(); ++d) {
    if (m & (1u << d)) st[d] = 0;
  }
}

std::vector<int64_t> decode_strides(const std::vector<int64_t>& shape, Reader& r,
                                    const StrideModes& m) {
  std::vector<int64_t> st = smax_cli::row_major_strides(shape);
  switch (r.u8() % m.modes) {
    case 3: permuted_padded_strides(shape, r, st); break;
    case 4: negate_some_strides(r, st); break;
    case 5:
      for (auto& s : st) s = static_cast<int8_t>(r.u8()) % m.small;
      break;
    case 6: zero_some_strides(r, st); break;
    case 7: {
      const int64_t step = m.step_min + r.u8() % m.step_choices;
      for (auto& s : st) s *= step;
      break;
    }
    default: break;
  }
  return st;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  for (int64_t s : shape) {
    if (s == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0 || __builtin_mul_overflow(n, s, &n)) return -1;
  }
  return n;
}

void span_of(const Layout& o, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = 0;
  for (size_t d = 0; d < o.shape.size(); ++d) {
    if (o.shape[d] <= 1) continue;
    const int64_t ext = o.strides[d] * (o.shape[d] - 1);
    (ext < 0 ? *lo : *hi) += ext;
  }
}

std::vector<int64_t> offsets_of(const Layout& o) {
  const int64_t n = numel_of(o.shape);
  std::vector<int64_t> out;
  if (n <= 0) return out;
  out.resize(static_cast<size_t>(n));
  const size_t r = o.shape.size();
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) off += idx[d] * o.strides[d];
    out[static_cast<size_t>(i)] = off;
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < o.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

bool bytes_overflow(const Layout& o, int esize) {
  if (numel_of(o.shape) <= 0) return false;
  __int128 lo = 0, hi = 0;
  for (size_t d = 0; d < o.shape.size(); ++d) {
    if (o.shape[d] <= 1) continue;
    const __int128 ext = static_cast<__int128>(o.strides[d]) * (o.shape[d] - 1);
    (ext < 0 ? lo : hi) += ext;
  }
  return hi * esize + esize > INT64_MAX || lo * esize < INT64_MIN;
}

bool has_duplicates(std::vector<int64_t> offs) {
  std::sort(offs.begin(), offs.end());
  return std::adjacent_find(offs.begin(), offs.end()) != offs.end();
}

bool output_layout_ok(const Layout& o) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (size_t d = 0; d < o.shape.size(); ++d) {
    if (o.shape[d] <= 1) continue;
    if (o.strides[d] == 0) return false;
    dims.push_back({std::llabs(o.strides[d]), o.shape[d]});
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;
  for (auto& d : dims) {
    if (d.first <= reach) return false;
    reach += d.first * (d.second - 1);
  }
  return true;
}

bool share_element(const Layout& a, const Layout& b) {
  std::set<int64_t> sa;
  for (int64_t x : offsets_of(a)) sa.insert(x + a.origin);
  for (int64_t x : offsets_of(b)) {
    if (sa.count(x + b.origin)) return true;
  }
  return false;
}

bool ranges_overlap(const Layout& a, const Layout& b) {
  if (numel_of(a.shape) <= 0 || numel_of(b.shape) <= 0) return false;
  int64_t alo, ahi, blo, bhi;
  span_of(a, &alo, &ahi);
  span_of(b, &blo, &bhi);
  return a.origin + alo <= b.origin + bhi && b.origin + blo <= a.origin + ahi;
}

bool same_view(const Layout& a, const Layout& b) {
  if (a.origin != b.origin || a.shape != b.shape) return false;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (a.shape[d] != 1 && a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

smax::TensorView tensor_view(const FuzzView& o, smax::DType dtype, void* data) {
  smax::TensorView v;
  v.dtype = dtype;
  v.rank = static_cast<int>(o.shape.size());
  for (size_t d = 0; d < o.shape.size() && d < 8; ++d) {
    v.shape[d] = o.shape[d];
    v.strides[d] = o.strides[d];
  }
  if (o.rank_override != -1000) v.rank = o.rank_override;
  v.data = o.null_data ? nullptr : data;
  return v;
}

void describe_view(std::ostream& os, const FuzzView& o) {
  os << " shape [";
  for (size_t i = 0; i < o.shape.size(); ++i) os << (i ? "," : "") << o.shape[i];
  os << "] strides [";
  for (size_t i = 0; i < o.strides.size(); ++i) os << (i ? "," : "") << o.strides[i];
  os << "] origin " << o.origin;
  if (o.rank_override != -1000) os << " rank=" << o.rank_override;
  if (o.null_data) os << " null";
  if (o.wrong_dtype) os << " wrong-dtype";
}

void FailureLog::fail(size_t i, double out, double ref, double bound, const char* what) {
  if (failures++ == 0) {
    std::ostringstream os;
    os.precision(10);
    os << "element " << i << ": out=" << out << " ref=" << ref << " bound=" << bound << " "
       << what;
    first = os.str();
  }
}

bool broadcastable(const std::vector<int64_t>& mask, const std::vector<int64_t>& target) {
  if (mask.size() > target.size()) return false;
  const size_t off = target.size() - mask.size();
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d] != target[d + off] && mask[d] != 1) return false;
  }
  return true;
}

StorageDraw draw_storage(uint8_t b) {
  static const smax::DType kTypes[4] = {smax::DType::kF64, smax::DType::kF16, smax::DType::kBF16,
                                        smax::DType::kF32};
  StorageDraw d;
  if ((b & 0x80) == 0) return d;
  d.in = kTypes[b & 3];
  d.out = kTypes[(b >> 2) & 3];
  return d;
}

void make_typed_arenas(std::vector<float>& arena, const StorageDraw& d,
                       std::vector<unsigned char>* typed_in, std::vector<unsigned char>* typed_out) {
  *typed_in = smax_cli::round_to_dtype(arena.data(), arena.size(), d.in);
  std::vector<float> out = arena;
  *typed_out = smax_cli::round_to_dtype(out.data(), out.size(), d.out);
}

double storage_round(smax::DType d, double v) {
  if (d == smax::DType::kF64 || std::isnan(v)) return v;
  float f = static_cast<float>(v);
  smax_cli::round_to_dtype(&f, 1, d);
  return f;
}

std::vector<double> dense_in_arena(const Layout& o, const std::vector<unsigned char>& arena,
                                   smax::DType d, size_t arena_elems) {
  const std::vector<double> all = smax_cli::widen_all(arena, d, arena_elems);
  std::vector<double> v;
  for (int64_t off : offsets_of(o)) v.push_back(all[static_cast<size_t>(o.origin + off)]);
  return v;
}

}  // namespace smax_fuzz
