// fuzz/harness.cc: see harness.h.
#include "harness.h"
#include "operands.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "reference/bounds.h"
#include "reference/reference.h"
#include "smax/c/smax.h"
#include "smax/smax.h"

namespace smax_fuzz {
namespace {

using smax::DType;
using smax::SoftmaxOptions;
using smax::TensorView;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int64_t kSegment = int64_t{1} << 16;  // kernels::kSegment: long rows cross it
constexpr int64_t kMaxElements = int64_t{1} << 14;
constexpr int64_t kGuard = 16;
const float kSentinel = -12345.678f;
constexpr uint8_t kSentinelByte = 0xA5;

Stats g_stats;

// ---- input decoding ---------------------------------------------------------

// Logit values: specials, denormals, huge, raw bit patterns, ordinary values.
float logit(Reader& r) {
  const uint8_t k = r.u8();
  switch (k % 20) {
    case 0: return kNaN;
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
    case 9: return static_cast<float>(static_cast<int16_t>(r.u16())) / 8.0f;  // wide
    default: return static_cast<float>(static_cast<int8_t>(r.u8())) / 16.0f;
  }
}

// Upstream gradients: bounded so that no f32 intermediate can overflow where
// float64 does not (|dy| <= 2^15 * 1e3), rarely NaN / inf.
float gradient(Reader& r) {
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

float option_float(Reader& r) {
  const uint8_t k = r.u8();
  if (k < 160) return 1.0f;
  const float table[] = {0.5f,   2.0f,  1e-3f, 1e3f,  1e-30f, 1e30f,   FLT_MAX, 1e-40f,
                         0.0f,   -1.0f, kNaN,  kInf,  -kInf,  3.0f,    0.125f,  7.25f,
                         1e-20f, 1e20f, 0.1f,  -0.0f, 1e-38f, FLT_MIN, 1e38f,   0.3f};
  return table[k % 24];
}

// ---- views in one arena ---------------------------------------------------------

// An operand: its Layout (operands.h: shape, strides, origin in the arena)
// and how the harness corrupts it.
struct Operand : Layout {
  const char* name = "";
  bool present = false;
  bool is_bool = false;
  int rank_override = -1000;  // corrupted rank, or -1000
  bool null_data = false;
  bool wrong_dtype = false;
  bool unallocatable = false;  // corrupted strides: never dereference
};

std::vector<int64_t> make_strides(const std::vector<int64_t>& shape, Reader& r, bool output) {
  const size_t rank = shape.size();
  std::vector<int64_t> st = row_major(shape);
  const uint8_t mode = r.u8();
  switch (mode % 10) {
    case 0:
    case 1:
    case 2: break;  // row-major
    case 3: {       // permuted memory order, padded
      std::vector<size_t> order(rank);
      for (size_t i = 0; i < rank; ++i) order[i] = i;
      for (size_t i = rank; i > 1; --i) std::swap(order[i - 1], order[r.u8() % i]);
      const int64_t pad = r.u8() % 3;
      int64_t s = 1;
      for (size_t i = rank; i-- > 0;) {
        st[order[i]] = s;
        s *= std::max<int64_t>(shape[order[i]], 1) + (i + 1 < rank ? pad : 0);
      }
      break;
    }
    case 4: {  // negative strides on some dims
      const uint8_t m = r.u8();
      for (size_t d = 0; d < rank; ++d) {
        if (m & (1u << d)) st[d] = -st[d];
      }
      break;
    }
    case 5: {  // arbitrary small strides: zero, negative, overlapping
      for (size_t d = 0; d < rank; ++d) st[d] = static_cast<int8_t>(r.u8()) % 40;
      break;
    }
    case 6: {  // broadcast (zero) strides on some dims
      const uint8_t m = r.u8();
      for (size_t d = 0; d < rank; ++d) {
        if (m & (1u << d)) st[d] = 0;
      }
      break;
    }
    case 7: {  // spaced
      const int64_t step = 1 + r.u8() % 3;
      for (auto& s : st) s *= step;
      break;
    }
    default: break;
  }
  (void)output;
  return st;
}

struct Case {
  Op op;
  int rank = 0;
  std::vector<int64_t> shape;
  int64_t axis = -1;
  SoftmaxOptions opt;
  bool use_c = false;
  bool raw_y = false;  // backward: y is arbitrary values (structural checks only)
  std::string target;
  Operand in0, in1, out, add_mask, bool_mask;  // in0: src or y; in1: dy
  bool alias = false;                          // out placed exactly on in0/in1
  bool must_reject = false;
  std::string reject_reason;
  std::vector<float> arena;
  std::vector<uint8_t> bytes;
};

void reject(Case& c, const std::string& why) {
  if (!c.must_reject) c.reject_reason = why;
  c.must_reject = true;
}

std::string describe(const Case& c) {
  std::ostringstream os;
  os << op_name(c.op) << " api=" << (c.use_c ? "C" : "C++") << " target=" << c.target
     << " shape=[";
  for (size_t i = 0; i < c.shape.size(); ++i) os << (i ? "," : "") << c.shape[i];
  os << "] axis=" << c.opt.axis << " scale=" << c.opt.scale << " temperature=" << c.opt.temperature
     << " algorithm=" << static_cast<int>(c.opt.algorithm)
     << " empty_row=" << static_cast<int>(c.opt.empty_row) << " threads=" << c.opt.threads
     << " alias=" << c.alias << " raw_y=" << c.raw_y;
  for (const Operand* o : {&c.in0, &c.in1, &c.out, &c.add_mask, &c.bool_mask}) {
    if (!o->present) continue;
    os << "\n  " << o->name << ": shape [";
    for (size_t i = 0; i < o->shape.size(); ++i) os << (i ? "," : "") << o->shape[i];
    os << "] strides [";
    for (size_t i = 0; i < o->strides.size(); ++i) os << (i ? "," : "") << o->strides[i];
    os << "] origin " << o->origin;
    if (o->rank_override != -1000) os << " rank=" << o->rank_override;
    if (o->null_data) os << " null";
    if (o->wrong_dtype) os << " wrong-dtype";
  }
  if (c.must_reject) os << "\n  must reject: " << c.reject_reason;
  return os.str();
}

// SMAX_FUZZ_DUMP=1: the float operands' values (the first 64 in index order,
// then where the specials sit), for reports on rows too long to print whole.
void dump_operand(const Case& c, const char* name, const Operand& o) {
  if (o.is_bool || o.null_data || o.shape.empty() || o.rank_override != -1000) return;
  int64_t numel = 1;
  for (int64_t s : o.shape) numel *= s;
  std::fprintf(stderr, "  %s values:", name);
  int64_t nan = 0, inf = 0, first_nan = -1, first_inf = -1;
  for (int64_t lin = 0; lin < numel; ++lin) {
    int64_t rem = lin, off = o.origin;
    for (size_t d = o.shape.size(); d-- > 0;) {
      off += (rem % o.shape[d]) * o.strides[d];
      rem /= o.shape[d];
    }
    if (off < 0 || off >= static_cast<int64_t>(c.arena.size())) return;
    const float v = c.arena[static_cast<size_t>(off)];
    if (lin < 64) std::fprintf(stderr, " %.9g", v);
    if (std::isnan(v) && nan++ == 0) first_nan = lin;
    if (std::isinf(v) && inf++ == 0) first_inf = lin;
  }
  std::fprintf(stderr, "\n    (%lld NaN, first at %lld; %lld inf, first at %lld)\n",
               static_cast<long long>(nan), static_cast<long long>(first_nan),
               static_cast<long long>(inf), static_cast<long long>(first_inf));
}

[[noreturn]] void violation(const Case& c, const std::string& what) {
  std::fprintf(stderr, "\nsmax fuzz VIOLATION: %s\n  case: %s\n", what.c_str(),
               describe(c).c_str());
  const char* dump = std::getenv("SMAX_FUZZ_DUMP");
  if (dump != nullptr && dump[0] == '1') {
    dump_operand(c, "in0", c.in0);
    dump_operand(c, "in1", c.in1);
    dump_operand(c, "add_mask", c.add_mask);
  }
  std::fflush(stderr);
  std::abort();
}

TensorView view_of(const Case& c, const Operand& o) {
  TensorView v;
  v.dtype = o.is_bool ? DType::kBool : DType::kF32;
  if (o.wrong_dtype) v.dtype = o.is_bool ? DType::kF32 : DType::kBool;
  v.rank = static_cast<int>(o.shape.size());
  for (size_t d = 0; d < o.shape.size() && d < 8; ++d) {
    v.shape[d] = o.shape[d];
    v.strides[d] = o.strides[d];
  }
  if (o.rank_override != -1000) v.rank = o.rank_override;
  if (o.null_data) {
    v.data = nullptr;
  } else if (o.is_bool) {
    v.data = const_cast<uint8_t*>(c.bytes.data()) + o.origin;
  } else {
    v.data = const_cast<float*>(c.arena.data()) + o.origin;
  }
  return v;
}

// ---- building a case -----------------------------------------------------------------

void decode(Case& c, Reader& r) {
  const bool backward = c.op == Op::kSoftmaxBackward || c.op == Op::kLogSoftmaxBackward;
  const uint8_t flags = r.u8();
  c.use_c = flags & 1;
  const bool long_row = (flags & 0x0e) == 0x0e;  // 1 in 8
  // Target cap.
  // Lift the previous input's cap first: supported_targets() is after the
  // cap, so the choice below would depend on the input run before.
  smax::set_max_target("");
  const std::vector<std::string> targets = smax::supported_targets();
  c.target = targets[r.u8() % targets.size()];
  // Shape.
  const uint8_t rb = r.u8();
  c.rank = (rb % 16 == 15) ? 5 + r.u8() % 4 : rb % 5;  // 0..4, sometimes 5..8
  c.shape.resize(static_cast<size_t>(c.rank));
  // Options.
  const uint8_t ab = r.u8();
  const int eff = std::max(c.rank, 1);
  if (ab >= 240) {
    const int64_t bad[] = {eff, -eff - 1, eff + 3, 8, -9, INT64_MAX, INT64_MIN, 1000};
    c.axis = bad[ab % 8];
  } else {
    c.axis = (ab & 1) ? -1 - static_cast<int64_t>((ab >> 1) % eff)
                      : static_cast<int64_t>((ab >> 1) % eff);
  }
  const bool axis_ok = c.axis >= -eff && c.axis < eff;
  const int ax = axis_ok ? static_cast<int>(c.axis < 0 ? c.axis + eff : c.axis) : eff - 1;
  int64_t total = 1;
  for (int d = 0; d < c.rank; ++d) {
    const uint8_t s = r.u8();
    int64_t size = s < 8 ? 0 : 1 + (s % 9);
    if (d == ax) {
      const uint16_t w = r.u16();
      size = s < 8 ? 0 : 1 + w % (s < 128 ? 40 : 400);
      if (long_row) size = kSegment - 3 + w % (kSegment + 9);
    }
    c.shape[static_cast<size_t>(d)] = size;
  }
  // Cap the element count: halve the largest batch dim until it fits.
  const int64_t limit = long_row ? 3 * kSegment : kMaxElements;
  for (;;) {
    int64_t prod = 1, largest = -1;
    for (int d = 0; d < c.rank; ++d) {
      const int64_t v = c.shape[static_cast<size_t>(d)];
      prod *= std::max<int64_t>(v, 1);
      if (d != ax && v > 1 && (largest < 0 || v > c.shape[static_cast<size_t>(largest)])) largest = d;
    }
    if (prod <= limit || largest < 0) break;
    c.shape[static_cast<size_t>(largest)] /= 2;
  }
  (void)total;
  c.opt.axis = c.axis;
  c.opt.scale = option_float(r);
  c.opt.temperature = option_float(r);
  const uint8_t al = r.u8();
  const int algos[] = {0, 1, 2, 3, 4, 0, 1, 3, 4, 2, 5, -1, 77};
  c.opt.algorithm = static_cast<smax::Algorithm>(al % 32 < 12 ? algos[al % 10] : algos[al % 13]);
  const uint8_t er = r.u8();
  c.opt.empty_row = static_cast<smax::EmptyRow>(er < 250 ? (er & 1) : (er == 250 ? 2 : -1));
  const uint8_t th = r.u8();
  c.opt.threads = th < 250 ? th % 4 : -1;

  // Operands.
  c.in0.name = backward ? "y" : "src";
  c.in0.present = true;
  c.in0.shape = c.shape;
  c.in0.strides = make_strides(c.shape, r, false);
  if (backward) {
    c.in1.name = "dy";
    c.in1.present = true;
    c.in1.shape = c.shape;
    c.in1.strides = make_strides(c.shape, r, false);
  }
  c.out.name = backward ? "dx" : "dst";
  c.out.present = true;
  if (c.op == Op::kLogSumExp) {
    const bool keepdim = r.u8() & 1;
    for (int d = 0; d < c.rank; ++d) {
      if (d == ax) {
        if (keepdim) c.out.shape.push_back(1);
      } else {
        c.out.shape.push_back(c.shape[static_cast<size_t>(d)]);
      }
    }
  } else {
    c.out.shape = c.shape;
  }
  c.out.strides = make_strides(c.out.shape, r, true);
  const uint8_t place = r.u8();
  // Masks (forward only; backward ignores them).
  const uint8_t mk = r.u8();
  if (!backward && (mk & 3) == 1) {
    c.add_mask.name = "additive_mask";
    c.add_mask.present = true;
  }
  if (!backward && (mk & 12) == 4) {
    c.bool_mask.name = "bool_mask";
    c.bool_mask.present = true;
    c.bool_mask.is_bool = true;
  }
  for (Operand* m : {&c.add_mask, &c.bool_mask}) {
    if (!m->present) continue;
    const int mrank = c.rank - static_cast<int>(r.u8() % (c.rank + 1));
    const uint8_t ones = r.u8();
    for (int d = 0; d < mrank; ++d) {
      const int64_t full = c.shape[static_cast<size_t>(c.rank - mrank + d)];
      m->shape.push_back((ones & (1u << d)) ? 1 : full);
    }
    if (r.u8() == 255 && mrank > 0) m->shape[0] += 1;  // not broadcastable (usually)
    m->strides = make_strides(m->shape, r, false);
  }

  // Corruptions that must be rejected.
  const uint8_t cor = r.u8();
  Operand* victims[] = {&c.in0, &c.in1, &c.out, &c.add_mask, &c.bool_mask};
  Operand* victim = victims[r.u8() % 5];
  if (!victim->present) victim = &c.in0;
  if (cor >= 232) {
    switch (cor % 8) {
      case 0: {  // element count overflow (all dims non-zero)
        const int64_t big[] = {INT64_MAX, int64_t{1} << 32, int64_t{1} << 62, 3037000500};
        victim->shape.assign({big[r.u8() % 4], big[r.u8() % 4], 3});
        victim->strides.assign({0, 0, 0});
        victim->unallocatable = true;
        break;
      }
      case 1:
      case 2: {  // byte offsets overflow int64 in one dim
        if (victim->shape.empty()) {
          victim->shape.push_back(2);
          victim->strides.push_back(1);
        }
        const size_t d = r.u8() % victim->shape.size();
        if (victim->shape[d] < 2) victim->shape[d] = 2;
        const int64_t huge[] = {INT64_MAX,          INT64_MIN,         INT64_MAX / 4 + 1,
                                -(INT64_MAX / 4) - 2, int64_t{1} << 61, -(int64_t{1} << 62),
                                INT64_MAX / 2,      INT64_MIN / 2};
        victim->strides[d] = huge[r.u8() % 8];
        if (victim->is_bool) victim->strides[d] = (r.u8() & 1) ? INT64_MAX : INT64_MIN;
        victim->unallocatable = true;
        break;
      }
      case 3: {  // negative size
        if (victim->shape.empty()) {
          victim->shape.push_back(1);
          victim->strides.push_back(1);
        }
        victim->shape[r.u8() % victim->shape.size()] = (r.u8() & 1) ? -1 : INT64_MIN;
        victim->unallocatable = true;
        break;
      }
      case 4: {
        const int bad[] = {9, -1, 100, INT32_MIN};
        victim->rank_override = bad[r.u8() % 4];
        break;
      }
      case 5: victim->wrong_dtype = true; break;
      case 6: victim->null_data = true; break;
      default: break;
    }
  }

  // Placement in the arena.
  int64_t cursor = kGuard;
  auto place_op = [&](Operand& o) {
    if (!o.present || o.is_bool) return;
    if (o.unallocatable || numel_of(o.shape) <= 0) {
      o.origin = cursor;
      cursor += 1 + kGuard;
      return;
    }
    int64_t lo, hi;
    span_of(o, &lo, &hi);
    o.origin = cursor - lo;
    cursor += hi - lo + 1 + kGuard;
  };
  place_op(c.in0);
  place_op(c.in1);
  place_op(c.add_mask);
  place_op(c.out);
  // Output placement: exact alias, or over an input.
  Operand* in_place = backward ? &c.in1 : &c.in0;
  const uint8_t pm = place % 16;
  if (!c.out.unallocatable && !in_place->unallocatable) {
    if (pm == 1 && c.op != Op::kLogSumExp && c.out.rank_override == -1000) {
      c.out.strides = in_place->strides;
      c.out.origin = in_place->origin;
      c.alias = true;
    } else if (pm == 2 || pm == 3) {
      Operand* over = (pm == 3 && backward) ? &c.in0 : (pm == 3 && c.add_mask.present ? &c.add_mask : in_place);
      c.out.origin = over->origin + static_cast<int8_t>(r.u8()) % 8;
    }
  }
  // Make room for every placed view (an output placed over an input may
  // reach beyond it), with guards on both sides.
  {
    int64_t min_at = kGuard, max_at = cursor;
    for (Operand* o : {&c.in0, &c.in1, &c.add_mask, &c.out}) {
      if (!o->present || o->unallocatable || numel_of(o->shape) <= 0) continue;
      int64_t lo, hi;
      span_of(*o, &lo, &hi);
      min_at = std::min(min_at, o->origin + lo);
      max_at = std::max(max_at, o->origin + hi + 1);
    }
    const int64_t shift = kGuard - min_at;
    for (Operand* o : {&c.in0, &c.in1, &c.add_mask, &c.out}) o->origin += shift;
    c.arena.assign(static_cast<size_t>(max_at + shift + kGuard), kSentinel);
  }
  // Bool mask bytes.
  if (c.bool_mask.present) {
    int64_t lo = 0, hi = 0;
    if (!c.bool_mask.unallocatable && numel_of(c.bool_mask.shape) > 0) span_of(c.bool_mask, &lo, &hi);
    c.bool_mask.origin = kGuard - lo;
    c.bytes.assign(static_cast<size_t>(hi - lo + 1 + 2 * kGuard), kSentinelByte);
  } else {
    c.bytes.assign(1, kSentinelByte);
  }

  // The model: must this call be rejected?
  if (!axis_ok) reject(c, "axis out of range");
  const float s = c.opt.scale / c.opt.temperature;
  if (!(std::isfinite(c.opt.scale) && c.opt.scale > 0)) reject(c, "scale");
  if (!(std::isfinite(c.opt.temperature) && c.opt.temperature > 0)) reject(c, "temperature");
  if (!(std::isfinite(s) && s > 0)) reject(c, "scale/temperature");
  const int a = static_cast<int>(c.opt.algorithm), e = static_cast<int>(c.opt.empty_row);
  if (a < 0 || a > 4) reject(c, "algorithm value");
  if (e < 0 || e > 1) reject(c, "empty_row value");
  if (c.opt.threads < 0) reject(c, "threads");
  for (Operand* o : victims) {
    if (!o->present) continue;
    if (o->rank_override != -1000) reject(c, std::string(o->name) + " rank");
    if (o->wrong_dtype) reject(c, std::string(o->name) + " dtype");
    for (int64_t v : o->shape) {
      if (v < 0) reject(c, std::string(o->name) + " negative size");
    }
    const int64_t n = numel_of(o->shape);
    if (n < 0) reject(c, std::string(o->name) + " element count overflow");
    if (n > 0 && o->null_data) reject(c, std::string(o->name) + " null data");
    if (n > 0 && bytes_overflow(*o, o->is_bool ? 1 : 4)) reject(c, std::string(o->name) + " byte offsets overflow");
  }
  // Shapes (only meaningful when the views themselves are sane).
  if (!c.must_reject) {
    for (Operand* m : {&c.add_mask, &c.bool_mask}) {
      if (m->present && !broadcastable(m->shape, c.shape)) {
        reject(c, std::string(m->name) + " not broadcastable");
      }
    }
  }
  if (!c.must_reject && numel_of(c.out.shape) > 0) {
    std::vector<int64_t> offs = offsets_of(c.out);
    if (has_duplicates(offs)) reject(c, "output writes one element twice");
    for (const Operand* in : {&c.in0, &c.in1, &c.add_mask}) {
      if (!in->present) continue;
      const bool exact_ok = c.op != Op::kLogSumExp && in == in_place && same_view(c.out, *in);
      if (!exact_ok && share_element(c.out, *in)) reject(c, std::string("output shares an element with ") + in->name);
    }
  }
  (void)s;
}

// Fills inputs with decoded values (after the model, before the reference).
void fill_inputs(Case& c, Reader& r) {
  const bool backward = c.op == Op::kSoftmaxBackward || c.op == Op::kLogSoftmaxBackward;
  auto fill = [&](Operand& o, auto&& value) {
    if (!o.present || o.unallocatable || o.null_data || o.is_bool) return;
    if (o.rank_override != -1000) return;
    for (int64_t off : offsets_of(o)) c.arena[static_cast<size_t>(o.origin + off)] = value();
  };
  // Repeating a short pattern of decoded values keeps long rows cheap.
  std::vector<float> pool;
  for (int i = 0; i < 64 && r.left(); ++i) pool.push_back(logit(r));
  if (pool.empty()) pool.push_back(0.5f);
  size_t k = 0;
  auto next_logit = [&] { return pool[k++ % pool.size()]; };
  if (!backward) {
    fill(c.in0, next_logit);
    fill(c.add_mask, next_logit);
  } else {
    std::vector<float> gpool;
    for (int i = 0; i < 64 && r.left(); ++i) gpool.push_back(gradient(r));
    if (gpool.empty()) gpool.push_back(0.25f);
    size_t g = 0;
    fill(c.in1, [&] { return gpool[g++ % gpool.size()]; });
    c.raw_y = (r.u8() % 8) == 0;
    if (c.raw_y || c.in0.unallocatable || c.in0.null_data || c.in0.rank_override != -1000 ||
        numel_of(c.in0.shape) <= 0) {
      fill(c.in0, next_logit);
    } else {
      // y = the saved forward output of decoded logits (the reference's,
      // rounded to f32), written through y's own layout. With overlapping
      // y strides later writes win, so y may not be a softmax output: the
      // bounds below hold for any y.
      std::vector<float> logits(static_cast<size_t>(numel_of(c.shape)));
      for (auto& v : logits) v = next_logit();
      TensorView lv;
      lv.data = logits.data();
      lv.rank = c.rank;
      const std::vector<int64_t> st = row_major(c.shape);
      for (int d = 0; d < c.rank; ++d) {
        lv.shape[d] = c.shape[static_cast<size_t>(d)];
        lv.strides[d] = st[static_cast<size_t>(d)];
      }
      SoftmaxOptions fo;
      fo.axis = c.axis;
      fo.scale = 1.0f;
      std::vector<double> y;
      try {
        y = c.op == Op::kSoftmaxBackward ? smax::reference::softmax(lv, fo)
                                         : smax::reference::log_softmax(lv, fo);
      } catch (const smax::Error&) {
        y.assign(logits.begin(), logits.end());  // axis out of range: any values
      }
      size_t i = 0;
      for (int64_t off : offsets_of(c.in0)) {
        c.arena[static_cast<size_t>(c.in0.origin + off)] = static_cast<float>(y[i++]);
      }
    }
  }
  if (c.bool_mask.present && !c.bool_mask.unallocatable && !c.bool_mask.null_data &&
      c.bool_mask.rank_override == -1000) {
    const uint8_t style = r.u8();
    for (int64_t off : offsets_of(c.bool_mask)) {
      const uint8_t b = r.u8();
      c.bytes[static_cast<size_t>(c.bool_mask.origin + off)] =
          style & 1 ? b : static_cast<uint8_t>(b & 1);
    }
  }
}

// ---- calling the library -------------------------------------------------------------

smax_tensor to_c(const TensorView& v) {
  smax_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = v.data;
  t.dtype = static_cast<int32_t>(v.dtype);
  t.rank = v.rank;
  for (int d = 0; d < 8; ++d) {
    t.shape[d] = v.shape[d];
    t.strides[d] = v.strides[d];
  }
  return t;
}

// Runs the op; returns "" on success, else the error message (after checking
// that the failure is a clean invalid-argument error naming the op).
std::string call(const Case& c, const SoftmaxOptions& opt, bool* ok) {
  const TensorView a = view_of(c, c.in0), out = view_of(c, c.out);
  const TensorView b = c.in1.present ? view_of(c, c.in1) : TensorView{};
  *ok = false;
  if (c.use_c) {
    smax_softmax_options o;
    smax_softmax_options_init(&o);
    o.axis = opt.axis;
    o.scale = opt.scale;
    o.temperature = opt.temperature;
    o.algorithm = static_cast<int32_t>(opt.algorithm);
    o.empty_row = static_cast<int32_t>(opt.empty_row);
    o.threads = opt.threads;
    smax_tensor ta = to_c(a), tb = to_c(b), tout = to_c(out), tm, tbm;
    if (opt.additive_mask) {
      tm = to_c(*opt.additive_mask);
      o.additive_mask = &tm;
    }
    if (opt.bool_mask) {
      tbm = to_c(*opt.bool_mask);
      o.bool_mask = &tbm;
    }
    smax_status st = SMAX_STATUS_INTERNAL;
    switch (c.op) {
      case Op::kSoftmax: st = smax_softmax(&ta, &tout, &o); break;
      case Op::kLogSoftmax: st = smax_log_softmax(&ta, &tout, &o); break;
      case Op::kLogSumExp: st = smax_logsumexp(&ta, &tout, &o); break;
      case Op::kSoftmaxBackward: st = smax_softmax_backward(&ta, &tb, &tout, &o); break;
      case Op::kLogSoftmaxBackward: st = smax_log_softmax_backward(&ta, &tb, &tout, &o); break;
    }
    const std::string msg = smax_last_error();
    if (st == SMAX_STATUS_OK) {
      if (!msg.empty()) violation(c, "C ABI: OK status with a non-empty smax_last_error()");
      *ok = true;
      return "";
    }
    if (st != SMAX_STATUS_INVALID_ARGUMENT) {
      violation(c, "C ABI: status " + std::to_string(st) + " (" + msg + ")");
    }
    if (msg.rfind(op_name(c.op), 0) != 0) violation(c, "C ABI message does not name the op: " + msg);
    return msg;
  }
  try {
    switch (c.op) {
      case Op::kSoftmax: smax::softmax(a, out, opt); break;
      case Op::kLogSoftmax: smax::log_softmax(a, out, opt); break;
      case Op::kLogSumExp: smax::logsumexp(a, out, opt); break;
      case Op::kSoftmaxBackward: smax::softmax_backward(a, b, out, opt); break;
      case Op::kLogSoftmaxBackward: smax::log_softmax_backward(a, b, out, opt); break;
    }
  } catch (const smax::Error& e) {
    const std::string msg = e.what();
    if (e.status() != smax::Status::kInvalidArgument) {
      violation(c, std::string("smax::Error with status ") + smax::status_name(e.status()) + ": " + msg);
    }
    if (msg.rfind(op_name(c.op), 0) != 0) violation(c, "error message does not name the op: " + msg);
    return msg;
  } catch (const std::exception& e) {
    violation(c, std::string("a non-smax exception escaped: ") + e.what());
  } catch (...) {
    violation(c, "an unknown exception escaped");
  }
  *ok = true;
  return "";
}

// ---- checking results ---------------------------------------------------------------

struct Check {
  const Case* c;
  std::string first;
  long long failures = 0;
  void fail(size_t i, double out, double ref, double bound, const char* what) {
    if (failures++ == 0) {
      std::ostringstream os;
      os.precision(10);
      os << "element " << i << ": out=" << out << " ref=" << ref << " bound=" << bound << " "
         << what;
      first = os.str();
    }
  }
};

// Special values exactly, finite values within `bound`. Returns false on a
// finite-value bound failure only (so callers can try a documented
// fallback); special-value mismatches are recorded directly.
bool element_ok(Check& ck, size_t i, float out_f, double ref, double bound, bool exact_zero) {
  const double out = out_f;
  if (std::isnan(ref) || std::isnan(out)) {
    if (std::isnan(ref) != std::isnan(out)) ck.fail(i, out, ref, bound, "(NaN mismatch)");
    return true;
  }
  if (std::isinf(ref)) {
    if (out != ref) ck.fail(i, out, ref, bound, "(inf mismatch)");
    return true;
  }
  if (std::isinf(out)) {
    if (static_cast<double>(static_cast<float>(ref)) != out) ck.fail(i, out, ref, bound, "(unexpected inf)");
    return true;
  }
  if (exact_zero && ref == 0.0) {
    if (out != 0.0) ck.fail(i, out, ref, 0.0, "(exact 0 required)");
    return true;
  }
  return std::fabs(out - ref) <= bound;
}

void check_result(Case& c, const std::vector<double>& ref, const std::vector<double>& y,
                  const std::vector<double>& dy) {
  const TensorView out_view = view_of(c, c.out);
  const std::vector<double> out = smax::reference::to_dense(out_view);
  if (out.size() != ref.size()) violation(c, "reference and output sizes differ");
  Check ck;
  ck.c = &c;
  const double s = static_cast<double>(c.opt.scale / c.opt.temperature);
  if (c.op == Op::kSoftmax) {
    for (size_t i = 0; i < ref.size(); ++i) {
      const double bound = smax::reference::softmax_bound(ref[i]);
      if (!element_ok(ck, i, static_cast<float>(out[i]), ref[i], bound, true)) {
        ck.fail(i, out[i], ref[i], bound, "(softmax bound)");
      }
    }
  } else if (c.op == Op::kLogSoftmax || c.op == Op::kLogSumExp) {
    for (size_t i = 0; i < ref.size(); ++i) {
      const double bound = smax::reference::log_softmax_bound(ref[i]);
      if (!element_ok(ck, i, static_cast<float>(out[i]), ref[i], bound, false)) {
        ck.fail(i, out[i], ref[i], bound, "(log bound)");
      }
    }
  } else if (!c.raw_y) {
    // (outer, n, inner) of the logical shape.
    std::vector<int64_t> shape = c.shape;
    if (shape.empty()) shape.push_back(1);
    const int r = static_cast<int>(shape.size());
    const int ax = static_cast<int>(c.axis < 0 ? c.axis + r : c.axis);
    int64_t outer = 1, n = shape[static_cast<size_t>(ax)], inner = 1;
    for (int d = 0; d < ax; ++d) outer *= shape[static_cast<size_t>(d)];
    for (int d = ax + 1; d < r; ++d) inner *= shape[static_cast<size_t>(d)];
    const bool log = c.op == Op::kLogSoftmaxBackward;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < inner; ++j) {
        smax::reference::BackwardRow row;
        for (int64_t k = 0; k < n; ++k) {
          const size_t i = static_cast<size_t>((o * n + k) * inner + j);
          row.add(y[i], dy[i]);
        }
        for (int64_t k = 0; k < n; ++k) {
          const size_t i = static_cast<size_t>((o * n + k) * inner + j);
          double bound;
          bool exact_zero;
          if (!log) {
            bound = smax::reference::softmax_backward_bound(s, y[i], dy[i], row);
            exact_zero = y[i] == 0.0;
          } else {
            bound = smax::reference::log_softmax_backward_bound(s, y[i], dy[i], row);
            exact_zero = y[i] == -std::numeric_limits<double>::infinity();
          }
          if (exact_zero && !std::isnan(ref[i]) && !std::isnan(out[i])) {
            if (out[i] != 0.0) ck.fail(i, out[i], ref[i], 0.0, "(exact 0 required)");
            continue;
          }
          if (element_ok(ck, i, static_cast<float>(out[i]), ref[i], bound, false)) continue;
          // softmax_backward only: the f32 products of the blocked dot
          // <dy, y> carry gamma_17 * sum|dy_j y_j| of error, the header's
          // separate dot term (tests/test_util.h leaves it out); it shows
          // only when <dy, y> cancels. Counted and reported, not a crash.
          const double gap = smax::reference::softmax_backward_dot_gap(s, y[i], row);
          if (!log && std::fabs(out[i] - ref[i]) <= bound + gap) {
            ++g_stats.known_dot_gap;
            continue;
          }
          ck.fail(i, out[i], ref[i], bound, "(backward bound)");
        }
      }
    }
  }
  if (ck.failures) {
    violation(c, std::to_string(ck.failures) + " output element(s) wrong; first: " + ck.first);
  }
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kSoftmax: return "softmax";
    case Op::kLogSoftmax: return "log_softmax";
    case Op::kLogSumExp: return "logsumexp";
    case Op::kSoftmaxBackward: return "softmax_backward";
    case Op::kLogSoftmaxBackward: return "log_softmax_backward";
  }
  return "?";
}

bool parse_op(const std::string& name, Op* op) {
  for (Op o : {Op::kSoftmax, Op::kLogSoftmax, Op::kLogSumExp, Op::kSoftmaxBackward,
               Op::kLogSoftmaxBackward}) {
    if (name == op_name(o)) {
      *op = o;
      return true;
    }
  }
  return false;
}

const Stats& stats() { return g_stats; }

void run_one(Op op, const uint8_t* data, size_t size) {
  ++g_stats.runs;
  Reader r(data, size);
  Case c;
  c.op = op;
  decode(c, r);
  for (const Operand* o : {&c.in0, &c.in1, &c.out, &c.add_mask, &c.bool_mask}) {
    // A corrupted view the model does not reject has no memory behind it:
    // calling would test the harness, not smax.
    if (o->present && o->unallocatable && !c.must_reject) return;
  }
  fill_inputs(c, r);
  smax::set_max_target(c.target);

  SoftmaxOptions opt = c.opt;
  if (c.add_mask.present) opt.additive_mask = view_of(c, c.add_mask);
  if (c.bool_mask.present) opt.bool_mask = view_of(c, c.bool_mask);

  // The reference, before the call (in-place calls overwrite the input).
  const bool backward = op == Op::kSoftmaxBackward || op == Op::kLogSoftmaxBackward;
  std::vector<double> ref, y, dy;
  bool ref_ok = false;
  if (!c.must_reject) {
    try {
      const TensorView a = view_of(c, c.in0);
      switch (op) {
        case Op::kSoftmax: ref = smax::reference::softmax(a, opt); break;
        case Op::kLogSoftmax: ref = smax::reference::log_softmax(a, opt); break;
        case Op::kLogSumExp: ref = smax::reference::logsumexp(a, opt); break;
        case Op::kSoftmaxBackward:
          ref = smax::reference::softmax_backward(a, view_of(c, c.in1), opt);
          break;
        case Op::kLogSoftmaxBackward:
          ref = smax::reference::log_softmax_backward(a, view_of(c, c.in1), opt);
          break;
      }
      if (backward) {
        y = smax::reference::to_dense(a);
        dy = smax::reference::to_dense(view_of(c, c.in1));
      }
      ref_ok = true;
    } catch (const smax::Error& e) {
      violation(c, std::string("the reference rejected a call the contract allows: ") + e.what());
    }
  }

  const std::vector<float> arena_before = c.arena;
  const std::vector<uint8_t> bytes_before = c.bytes;
  bool ok = false;
  const std::string msg = call(c, opt, &ok);

  if (!ok) {
    ++g_stats.rejected;
    if (std::memcmp(arena_before.data(), c.arena.data(), c.arena.size() * sizeof(float)) != 0 ||
        bytes_before != c.bytes) {
      violation(c, "a rejected call wrote to memory: " + msg);
    }
    if (!c.must_reject) {
      // Only the conservative address-range overlap check may reject a
      // call the model allows.
      bool grey = false;
      if (!c.out.unallocatable) {
        for (const Operand* in : {&c.in0, &c.in1, &c.add_mask}) {
          if (in->present && ranges_overlap(c.out, *in)) grey = true;
        }
        if (!output_layout_ok(c.out)) grey = true;
      }
      if (!grey) violation(c, "a valid call was rejected: " + msg);
      ++g_stats.grey;
    }
    return;
  }
  ++g_stats.accepted;
  if (c.must_reject) violation(c, "an invalid call was accepted");
  if (!ref_ok) violation(c, "accepted without a reference");

  // Nothing outside dst changed (dst's elements may).
  {
    std::vector<char> writable(c.arena.size(), 0);
    for (int64_t off : offsets_of(c.out)) writable[static_cast<size_t>(c.out.origin + off)] = 1;
    for (size_t i = 0; i < c.arena.size(); ++i) {
      if (!writable[i] && std::memcmp(&arena_before[i], &c.arena[i], sizeof(float)) != 0) {
        violation(c, "memory outside dst changed at arena index " + std::to_string(i));
      }
    }
    if (bytes_before != c.bytes) violation(c, "the bool mask changed");
  }
  check_result(c, ref, y, dy);

  // Determinism: the same bits with one thread (when the inputs survived).
  const bool inputs_intact = !c.alias && !c.must_reject;
  bool overlap = false;
  for (const Operand* in : {&c.in0, &c.in1, &c.add_mask}) {
    if (in->present && ranges_overlap(c.out, *in)) overlap = true;
  }
  if (inputs_intact && !overlap && opt.threads != 1 && numel_of(c.out.shape) > 0) {
    const std::vector<float> first = c.arena;
    SoftmaxOptions one = opt;
    one.threads = 1;
    bool ok1 = false;
    const std::string m1 = call(c, one, &ok1);
    if (!ok1) violation(c, "the threads=1 rerun failed: " + m1);
    if (std::memcmp(first.data(), c.arena.data(), first.size() * sizeof(float)) != 0) {
      violation(c, "results differ between threads=" + std::to_string(opt.threads) +
                       " and threads=1");
    }
  }
}

}  // namespace smax_fuzz
