// tests/test_dtypes.cc: storage dtypes (f64, f16, bf16) of every op of the
// op table (testing/op_table.h: normalisers, losses, samplers and their
// backward), and the scalar conversions they rest on (src/core/convert.h).
//
// Contract checked for every op and dtype (include/smax/tensor.h, docs/dtypes.md):
//  * with f16 / bf16 operands the op runs in f32 arithmetic on the operands
//    widened to f32 and rounds each output once: the typed output equals
//    the f32 output of the same (rounded) inputs rounded to the dtype, bit
//    for bit;
//  * so it is within the op's documented f32 bound of the float64 oracle
//    plus half an ulp of the output dtype (checked too, on the oracle).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/convert.h"
#include "kernels/dtype_convert.h"
#include "op_table.h"
#include "reference/rows.h"
#include "reference/bounds.h"
#include "smax/smax.h"
#include "test_util.h"
#include "typed_call.h"

namespace {

using smax::DType;
using smax_cli::ExtOp;

// Independent rounding reference: v rounded to `bits` significant bits with
// exponent floor `min_exp` (subnormals), nearest even, overflow past `max`
// to inf. Uses double arithmetic (nearbyint rounds to nearest even).
double round_reference(double v, int bits, int min_exp, double max) {
  if (!std::isfinite(v) || v == 0.0) return v;
  const int e = std::max(std::ilogb(v), min_exp);
  const double q = std::ldexp(std::nearbyint(std::ldexp(v, bits - 1 - e)), e - (bits - 1));
  if (std::fabs(q) > max) return std::copysign(std::numeric_limits<double>::infinity(), v);
  return q;
}

std::vector<float> conversion_probes() {
  std::vector<float> v;
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  // Ties and neighbours around every f16 / bf16 value, overflow edges,
  // subnormals of both.
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float a = smax::detail::f16_to_f32(static_cast<uint16_t>(h));
    const float b = smax::detail::bf16_to_f32(static_cast<uint16_t>(h));
    for (float x : {a, b}) {
      v.push_back(x);
      v.push_back(std::nextafter(x, 0.0f));
      v.push_back(std::nextafter(x, std::numeric_limits<float>::infinity()));
    }
    const float next = smax::detail::f16_to_f32(static_cast<uint16_t>(h + 1));
    if (std::isfinite(a) && std::isfinite(next)) v.push_back((a + next) / 2);  // exact tie in f32
  }
  for (float x : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 5.9604645e-8f, 2.9802322e-8f,
                  2.9802326e-8f, 3.4028235e38f, 3.3961776e38f, 1e-45f, 1.1754942e-38f}) {
    v.push_back(x);
    v.push_back(-x);
  }
  return v;
}

TEST(DtypeConvert, F16RoundsToNearestEven) {
  for (float x : conversion_probes()) {
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(smax::detail::f16_to_f32(smax::detail::f32_to_f16(x))));
      continue;
    }
    const double want = round_reference(x, 11, -14, 65504.0);
    const float got = smax::detail::f16_to_f32(smax::detail::f32_to_f16(x));
    ASSERT_EQ(static_cast<double>(got), want) << "x = " << x;
    ASSERT_EQ(std::signbit(got), std::signbit(x)) << "x = " << x;
  }
}

TEST(DtypeConvert, Bf16RoundsToNearestEven) {
  for (float x : conversion_probes()) {
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(smax::detail::bf16_to_f32(smax::detail::f32_to_bf16(x))));
      continue;
    }
    const double want = round_reference(x, 8, -126, 3.3895313892515355e38);
    const float got = smax::detail::bf16_to_f32(smax::detail::f32_to_bf16(x));
    ASSERT_EQ(static_cast<double>(got), want) << "x = " << x;
  }
}

TEST(DtypeConvert, WideningIsExactForEveryNarrowValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float f16 = smax::detail::f16_to_f32(b);
    if (!std::isnan(f16)) {
      EXPECT_EQ(smax::detail::f32_to_f16(f16), b) << h;  // round trip
    }
    const float bf = smax::detail::bf16_to_f32(b);
    if (!std::isnan(bf)) {
      EXPECT_EQ(smax::detail::f32_to_bf16(bf), b) << h;
    }
  }
}

TEST(DtypeConvert, DoubleToNarrowRoundsOnce) {
  // 1 + 2^-8 + 2^-30 is above the bf16 tie 1 + 2^-8: it must round up,
  // which rounding through f32 first (to the tie, then to even: 1) misses.
  const double v = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  uint16_t h = 0;
  smax::detail::store_f64(&h, DType::kBF16, v);
  EXPECT_EQ(smax::detail::bf16_to_f32(h), 1.0f + 0.0078125f);
  smax::detail::store_f64(&h, DType::kF16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
  EXPECT_EQ(smax::detail::f16_to_f32(h), 1.0f + 0.0009765625f);
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Adversarial inputs of a dtype: besides N(0, 1), values spread wide enough
// that outputs reach the narrow types' subnormals and zero (uniform on
// [-100, 100]), and values past f16's 65504 (they round to +-inf in f16:
// NaN rows, as the oracle on the same values says) in a bool-masked call
// whose first row is all masked and whose other rows lose every third entry.
struct Variant {
  smax_cli::Dist dist;
  bool masked;
};
const Variant kVariants[] = {
    {smax_cli::Dist{}, false},
    {smax_cli::Dist{smax_cli::Dist::Kind::kUniform, -100.0, 100.0}, false},
    {smax_cli::Dist{smax_cli::Dist::Kind::kUniform, -70000.0, 70000.0}, true},
};

// Runs `op` on `shape` in f32 and in `dtype` and checks the contract above.
void check_op_dtype(const ExtOp& op, const std::vector<int64_t>& shape, DType dtype,
                    const Variant& variant) {
  SCOPED_TRACE(op.name + " " + smax::dtype_name(dtype) + " shape " + std::to_string(shape[0]) +
               "x" + std::to_string(shape[1]) + " dist " + smax_cli::format_dist(variant.dist) +
               (variant.masked ? " masked" : ""));
  smax_cli::ExtCall call;
  call.params = smax_cli::parse_params(op, "");
  if (call.params.count("k")) call.params["k"] = std::min<double>(call.params["k"], shape[1]);
  call.options.threads = 1;
  std::vector<uint8_t> keep(static_cast<size_t>(shape[0] * shape[1]), 1);
  for (size_t i = 0; i < keep.size(); ++i) {
    if (i < static_cast<size_t>(shape[1]) || i % 3 == 1) keep[i] = 0;
  }
  if (variant.masked) call.options.bool_mask = smax::make_bool_view(keep.data(), {shape[0], shape[1]});
  auto inst = smax_cli::make_instance(op, shape, call, variant.dist, 11);
  auto typed = smax_cli::make_typed_call(*inst, dtype);
  op.run(inst->call);
  const std::vector<float> f32_out = inst->out;
  const std::vector<int64_t> f32_index = inst->out_index;
  op.run(typed->call);
  const int64_t m = smax_cli::product(inst->out_shape);
  const std::vector<double> got = smax_cli::typed_output(*typed, m);
  // f64: the ops with a float64 path (docs/dtypes.md) compute in float64
  // there, so only the bound below applies to f64 outputs; narrow outputs
  // are always the f32 result rounded.
  for (int64_t i = 0; i < m && dtype != DType::kF64; ++i) {
    const float f = f32_out[static_cast<size_t>(i)];
    const double want = static_cast<double>(smax::detail::round_to(dtype, f));
    ASSERT_TRUE(same_value(got[static_cast<size_t>(i)], want))
        << "element " << i << ": got " << got[static_cast<size_t>(i)] << ", f32 result rounded "
        << want;
  }
  EXPECT_EQ(inst->out_index, f32_index);  // index outputs do not depend on the dtype
  if (!op.reference || op.check_indices) return;
  // f64 inputs take the ops' float64 paths: the oracle models those
  // (src/reference/rows.h, Float64Semantics).
  const smax::reference::Float64Semantics semantics(dtype == DType::kF64 &&
                                                    smax_cli::has_float64_path(op.name));
  const std::vector<double> ref = op.reference(inst->call);
  smax::reference::ElementBounds b = smax_cli::op_bounds(op, smax_cli::bound_call_of(inst->call), ref);
  for (int64_t i = 0; i < m; ++i) {
    const double g = got[static_cast<size_t>(i)];
    const double r = ref[static_cast<size_t>(i)];
    // Backward passes promise exact 0 at masked entries, whatever the row
    // holds (a NaN row too, where the oracle says NaN): op_table.h.
    if (variant.masked && op.zeroes_masked_gradient && m == static_cast<int64_t>(keep.size()) &&
        keep[static_cast<size_t>(i)] == 0) {
      ASSERT_EQ(g, 0.0) << "masked element " << i;
      continue;
    }
    b.bound[static_cast<size_t>(i)] +=
        smax_cli::half_ulp(dtype, std::max(std::fabs(r), std::fabs(g)));
    ASSERT_LE(smax::reference::bound_ratio(b, static_cast<size_t>(i), g, r), 1.0)
        << "element " << i << ": got " << g << ", reference " << r;
  }
}

// f64 -> f32 widening (every op's f64 operands) rounds as the IEEE cast on
// every SIMD target: +-inf and values beyond f32 become +-inf, not +-FLT_MAX
// (Highway's scalar DemoteTo saturates; fuzz/regressions README).
class DtypeConvertTargets : public smax_test::TargetTest {};

TEST_P(DtypeConvertTargets, F64WideningRoundsAsTheIeeeCast) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> special = {inf, -inf, 1e300, -1e300, 0x1.fffffep127, 0x1.ffffffp127,
                                       -0x1.ffffffp127, 0x1.fffffefffffffp127, std::nan(""), 1.0,
                                       0x1p-150, 0x1.0000000000001p-150, -0x1p-149, 1.0 / 3.0};
  std::vector<double> src;
  for (int rep = 0; rep < 3; ++rep) src.insert(src.end(), special.begin(), special.end());
  for (size_t n : {size_t{1}, size_t{5}, special.size(), src.size()}) {
    std::vector<float> got(n);
    smax::kernels::widen_row(src.data(), DType::kF64, static_cast<int64_t>(n), got.data());
    for (size_t i = 0; i < n; ++i) {
      const float want = static_cast<float>(src[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
      } else {
        EXPECT_EQ(got[i], want) << "i " << i << " value " << src[i] << " n " << n;
      }
    }
  }
}

SMAX_INSTANTIATE_PER_TARGET(DtypeConvertTargets);

TEST(DtypeOps, EveryTableOpTakesEveryFloatingDtype) {
  for (const ExtOp& op : smax_cli::ext_ops()) {
    if (!smax_cli::takes_floating_dtypes(op)) continue;  // integer ops: docs/quantized.md
    for (DType dtype : {DType::kF64, DType::kF16, DType::kBF16}) {
      for (const std::vector<int64_t>& shape :
           std::vector<std::vector<int64_t>>{{5, 37}, {3, 1}, {2, 300}}) {
        for (const Variant& variant : kVariants) {
          try {
            check_op_dtype(op, shape, dtype, variant);
          } catch (const std::exception& e) {
            ADD_FAILURE() << op.name << " " << smax::dtype_name(dtype) << " "
                          << smax_cli::format_dist(variant.dist) << ": " << e.what();
          }
        }
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(DtypeOps, NonFloatingOperandsNameTheirDtype) {
  std::vector<int32_t> x(6, 1);
  std::vector<float> y(6);
  smax::TensorView src = smax::make_view(x.data(), DType::kI32, 1, std::vector<int64_t>{6}.data(),
                                         nullptr);
  try {
    smax::sparsemax(src, smax::make_view(y.data(), {6}));
    FAIL() << "expected smax::Error";
  } catch (const smax::Error& e) {
    EXPECT_NE(std::string(e.what()).find("src has dtype i32, expected a floating dtype"),
              std::string::npos)
        << e.what();
  }
}

TEST(DtypeOps, MixedOperandDtypes) {
  // bf16 logits, f32 output; f16 input, f64 output: each output rounds once.
  std::vector<float> x = {0.5f, -1.25f, 3.0f, 0.0f, 2.5f, -7.0f};
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = smax::detail::f32_to_bf16(x[i]);
  const int64_t shape[] = {2, 3};
  std::vector<float> ref(6), out(6);
  smax::sparsemax(smax::make_view(x.data(), {2, 3}), smax::make_view(ref.data(), {2, 3}));
  smax::sparsemax(smax::make_view(xb.data(), DType::kBF16, 2, shape, nullptr),
                  smax::make_view(out.data(), {2, 3}));
  EXPECT_EQ(out, ref);  // these x are exact in bf16
  std::vector<double> out64(6);
  smax::sparsemax(smax::make_view(xb.data(), DType::kBF16, 2, shape, nullptr),
                  smax::make_view(out64.data(), DType::kF64, 2, shape, nullptr));
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(out64[i], static_cast<double>(ref[i]));
}

}  // namespace

namespace {

// A contiguous view of `dtype` over `bytes`, filled from `values` rounded
// to the dtype (values are rounded in place too).
smax::TensorView typed_tensor(std::vector<float>& values, std::vector<unsigned char>& bytes,
                              DType dtype, std::vector<int64_t> shape) {
  const int size = smax::dtype_size(dtype);
  bytes.assign(values.size() * static_cast<size_t>(size) + 8, 0);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = smax::detail::round_to(dtype, values[i]);
    smax::detail::store_f32(bytes.data() + i * static_cast<size_t>(size), dtype, values[i]);
  }
  return smax::make_view(bytes.data(), dtype, static_cast<int>(shape.size()), shape.data(), nullptr);
}

std::vector<double> widened(const std::vector<unsigned char>& bytes, DType dtype, size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = smax::detail::load_f64(bytes.data() + i * static_cast<size_t>(smax::dtype_size(dtype)), dtype);
  }
  return v;
}

// linear_cross_entropy (not in the op table): narrow hidden / weight / bias
// convert one tile at a time and the GEMM runs in f32, so every output is
// the f32 result on the same (rounded) values, rounded once.
TEST(DtypeOps, LinearCrossEntropyNarrowIsTheF32ResultRounded) {
  const int64_t N = 6, D = 16, V = 50;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(smax::dtype_name(dtype));
    std::vector<float> h(N * D), w(V * D), b(V);
    for (auto* v : {&h, &w, &b}) {
      for (float& x : *v) x = normal(rng);
    }
    std::vector<int64_t> target(N);
    for (int64_t i = 0; i < N; ++i) target[static_cast<size_t>(i)] = (i * 7) % V;
    std::vector<unsigned char> hb, wb, bb;
    const smax::TensorView ht = typed_tensor(h, hb, dtype, {N, D});
    const smax::TensorView wt = typed_tensor(w, wb, dtype, {V, D});
    const smax::TensorView bt = typed_tensor(b, bb, dtype, {V});
    const smax::TensorView tv = smax::make_index_view(target.data(), {N});
    // f32 on the rounded values.
    float loss32 = 0, one = 1;
    std::vector<float> dh32(N * D), dw32(V * D), db32(V);
    smax::linear_cross_entropy(smax::make_view(h.data(), {N, D}), smax::make_view(w.data(), {V, D}),
                               tv, smax::make_view(b.data(), {V}), smax::make_view(&loss32, {}));
    smax::linear_cross_entropy_backward(
        smax::make_view(h.data(), {N, D}), smax::make_view(w.data(), {V, D}), tv,
        smax::make_view(b.data(), {V}), smax::make_view(&one, {}), smax::make_view(dh32.data(), {N, D}),
        smax::make_view(dw32.data(), {V, D}), smax::make_view(db32.data(), {V}));
    // Typed.
    std::vector<float> zeros_nd(N * D), zeros_vd(V * D), zeros_v(V), lossv(1), onev(1, 1.0f);
    std::vector<unsigned char> lb, gb, dhb, dwb, dbb;
    const smax::TensorView lt = typed_tensor(lossv, lb, dtype, {});
    const smax::TensorView gt = typed_tensor(onev, gb, dtype, {});
    const smax::TensorView dht = typed_tensor(zeros_nd, dhb, dtype, {N, D});
    const smax::TensorView dwt = typed_tensor(zeros_vd, dwb, dtype, {V, D});
    const smax::TensorView dbt = typed_tensor(zeros_v, dbb, dtype, {V});
    smax::linear_cross_entropy(ht, wt, tv, bt, lt);
    smax::linear_cross_entropy_backward(ht, wt, tv, bt, gt, dht, dwt, dbt);
    EXPECT_EQ(widened(lb, dtype, 1)[0], smax::detail::round_to(dtype, loss32));
    const auto check = [&](const std::vector<unsigned char>& got, const std::vector<float>& want) {
      const std::vector<double> g = widened(got, dtype, want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(g[i], static_cast<double>(smax::detail::round_to(dtype, want[i]))) << i;
      }
    };
    check(dhb, dh32);
    check(dwb, dw32);
    check(dbb, db32);
  }
}

}  // namespace

namespace {

// attention: narrow q / k / v / dout convert block by block into the f32
// GEMM operands; out, lse, dq, dk, dv are the f32 results rounded once.
// (f64 operands run the float64 path: tests/test_attention_f64.cc.)
TEST(DtypeOps, AttentionNarrowIsTheF32ResultRounded) {
  const int64_t B = 1, H = 2, L = 9, D = 8;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(smax::dtype_name(dtype)) + (causal ? " causal" : ""));
      const size_t n = static_cast<size_t>(B * H * L * D);
      std::vector<float> q(n), k(n), v(n), dout(n);
      for (auto* t : {&q, &k, &v, &dout}) {
        for (float& x : *t) x = normal(rng);
      }
      std::vector<unsigned char> qb, kb, vb, gb, ob, lb, dqb, dkb, dvb;
      const std::vector<int64_t> shape = {B, H, L, D};
      const smax::TensorView qt = typed_tensor(q, qb, dtype, shape);
      const smax::TensorView kt = typed_tensor(k, kb, dtype, shape);
      const smax::TensorView vt = typed_tensor(v, vb, dtype, shape);
      const smax::TensorView gt = typed_tensor(dout, gb, dtype, shape);
      std::vector<float> zeros(n), zl(static_cast<size_t>(B * H * L));
      const smax::TensorView ot = typed_tensor(zeros, ob, dtype, shape);
      const smax::TensorView lt = typed_tensor(zl, lb, dtype, {B, H, L});
      const smax::TensorView dqt = typed_tensor(zeros, dqb, dtype, shape);
      const smax::TensorView dkt = typed_tensor(zeros, dkb, dtype, shape);
      const smax::TensorView dvt = typed_tensor(zeros, dvb, dtype, shape);
      std::vector<float> o32(n), l32(zl.size()), dq32(n), dk32(n), dv32(n);
      const auto f32 = [&](std::vector<float>& d) {
        return smax::make_view(d.data(), DType::kF32, 4, shape.data(), nullptr);
      };
      smax::AttentionOptions opt;
      opt.is_causal = causal;
      opt.threads = 1;
      smax::AttentionOptions opt32 = opt;
      opt32.lse = smax::make_view(l32.data(), {B, H, L});
      smax::attention(f32(q), f32(k), f32(v), f32(o32), opt32);
      smax::attention_backward(f32(q), f32(k), f32(v), f32(o32), f32(dout), f32(dq32), f32(dk32),
                               f32(dv32), opt);
      smax::AttentionOptions optt = opt;
      optt.lse = lt;
      smax::attention(qt, kt, vt, ot, optt);
      // The typed backward reads the typed forward's output (as a user's
      // saved bf16 `out`): the f32 backward on that rounded out is the match.
      std::vector<double> ow = widened(ob, dtype, n);
      std::vector<float> o_rounded(ow.begin(), ow.end());
      smax::attention_backward(f32(q), f32(k), f32(v), f32(o_rounded), f32(dout), f32(dq32),
                               f32(dk32), f32(dv32), opt);
      smax::attention_backward(qt, kt, vt, ot, gt, dqt, dkt, dvt, opt);
      const auto check = [&](const std::vector<unsigned char>& got, const std::vector<float>& want,
                             const char* what) {
        const std::vector<double> g = widened(got, dtype, want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(g[i], smax::detail::round_to(dtype, want[i])) << what << " element " << i;
        }
      };
      check(ob, o32, "out");
      check(lb, l32, "lse");
      check(dqb, dq32, "dq");
      check(dkb, dk32, "dk");
      check(dvb, dv32, "dv");
    }
  }
}

}  // namespace
