// fuzz/harness_decode.cc: input values, operand strides, the decoding of
// one input into a Case and its inputs filled (part of the softmax-family
// harness, harness.h; what the parts share: harness_internal.h).
#include "harness_internal.h"

namespace smax_fuzz {
namespace family_internal {

// Logit values: specials, denormals, huge, raw bit patterns, ordinary values.
float logit(Reader& r) {
  const uint8_t k = r.u8();
  const unsigned kase = k % 20;
  if (kase < 10) return special_logit(kase, k, r);
  return static_cast<float>(static_cast<int8_t>(r.u8())) / 16.0f;
}

float option_float(Reader& r) {
  const uint8_t k = r.u8();
  if (k < 160) return 1.0f;
  const float table[] = {0.5f,   2.0f,  1e-3f, 1e3f,  1e-30f, 1e30f,   FLT_MAX, 1e-40f,
                         0.0f,   -1.0f, kNaN,  kInf,  -kInf,  3.0f,    0.125f,  7.25f,
                         1e-20f, 1e20f, 0.1f,  -0.0f, 1e-38f, FLT_MIN, 1e38f,   0.3f};
  return table[k % 24];
}

// The softmax family's stride draw (modes 0..2 and 8, 9: row-major).
constexpr StrideModes kStrides{10, 40, 1, 3};

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
  c.in0.strides = decode_strides(c.shape, r, kStrides);
  if (backward) {
    c.in1.name = "dy";
    c.in1.present = true;
    c.in1.shape = c.shape;
    c.in1.strides = decode_strides(c.shape, r, kStrides);
  }
  c.out.name = backward ? "dx" : "dst";
  c.out.present = true;
  if (c.op == Op::kLogsumexp) {
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
  c.out.strides = decode_strides(c.out.shape, r, kStrides);
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
    m->strides = decode_strides(m->shape, r, kStrides);
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
    if (pm == 1 && c.op != Op::kLogsumexp && c.out.rank_override == -1000) {
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
      const bool exact_ok = c.op != Op::kLogsumexp && in == in_place && same_view(c.out, *in);
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
      const std::vector<int64_t> st = smax_cli::row_major_strides(c.shape);
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

}  // namespace family_internal
}  // namespace smax_fuzz
