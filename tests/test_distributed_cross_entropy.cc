// The vocabulary-parallel cross_entropy and cross_entropy_backward
// (include/smax/distributed.h, src/ops/distributed/cross_entropy_sharded.cc)
// on P = 1..4 ranks (threads), even, uneven and empty shards: every
// CrossEntropyOptions option and the combinations that change the record
// (class weights, label smoothing, z-loss, softcap, probability targets,
// ignore_index, every reduction and empty_mean, every optional output, the
// fused gradient, in place), bf16 / f16 logits, masks, scale; special rows
// (NaN in one shard, +inf, all masked, all ignored, a rank owning no
// target). One rank: bit-equal to the single-process op. Several: within the
// stated bound (the single-process bound + the exchange's 2^-24) of the
// float64 oracle (src/reference/cross_entropy.h) on the whole row;
// replicated outputs the same bits on every rank; bits independent of
// threads; errors on one rank or disagreements fail every rank, writing
// nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "distributed_util.h"
#include "ops/distributed/sharded_common.h"
#include "reference/cross_entropy.h"
#include "smax/distributed.h"
#include "smax/losses.h"

namespace {

using smax::CrossEntropyOptions;
using smax::DType;
using smax::EmptyMean;
using smax::Reduction;
using smax::SoftmaxOptions;
using smax::TensorView;
using smax::distributed::Communicator;
using smax::testing::Dense;
using smax::testing::layouts_for;
using smax::testing::message_of;
using smax::testing::offsets_of;
using smax::testing::run_ok;
using smax::testing::run_ranks;
namespace ref = smax::reference;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kX = 0x1p-24;  // the exchange's rounding (d_k as f32)

struct Case {
  int64_t R = 6, V = 37;
  DType dt = DType::kF32;
  bool probs = false, weights = false;
  float a = 0.0f, zs = 0.0f, cap = 0.0f;
  float scale = 1.0f, temperature = 1.0f;
  bool add_mask = false, bool_mask = false;
  int ignore_every = 0;  // rows r with r % ignore_every == 1 are ignored
  bool all_ignored = false;
  Reduction red = Reduction::kMean;
  EmptyMean empty_mean = EmptyMean::kNan;
  smax::EmptyRow empty_row = smax::EmptyRow::kZero;
  bool outputs = true, fused = true, in_place = false;
  int threads = 0;
  // special rows: 0 NaN in the middle shard's part, 1 +inf, 2 all -inf
  bool specials = false;
  std::string name() const {
    std::string s = std::string(smax::dtype_name(dt)) + (probs ? " probs" : " index") +
                    (weights ? " weights" : "") + " a " + std::to_string(a) + " zs " +
                    std::to_string(zs) + " cap " + std::to_string(cap) + " red " +
                    std::to_string(static_cast<int>(red)) + (add_mask ? " add_mask" : "") +
                    (bool_mask ? " bool_mask" : "") + " ignore " + std::to_string(ignore_every) +
                    (all_ignored ? " all-ignored" : "") + (specials ? " specials" : "") +
                    (in_place ? " in-place" : "");
    return s;
  }
};

// The full (unsharded) operands of a case.
struct Inputs {
  Dense x, q, w, add;
  std::vector<uint8_t> keep;
  std::vector<int64_t> y;
  explicit Inputs(const Case& c)
      : x(c.dt, c.R, c.V), q(DType::kF32, c.R, c.V), w(DType::kF32, 1, c.V),
        add(DType::kF32, c.R, c.V), keep(static_cast<size_t>(c.R * c.V), 1),
        y(static_cast<size_t>(c.R)) {
    std::mt19937 gen(static_cast<uint32_t>(c.R * 131 + c.V));
    std::normal_distribution<double> nd(0.0, 3.0);
    std::uniform_real_distribution<double> ud(0.0, 1.0);
    for (int64_t i = 0; i < c.R * c.V; ++i) {
      x.set(i, nd(gen));
      add.set(i, (i % 11 == 3) ? -kInf : 0.5 * ud(gen));
      keep[static_cast<size_t>(i)] = (i % 13) != 5;
    }
    for (int64_t j = 0; j < c.V; ++j) w.set(j, 0.25 + 2.0 * ud(gen));
    for (int64_t r = 0; r < c.R; ++r) {
      double s = 0.0;
      for (int64_t j = 0; j < c.V; ++j) s += (q.set(r * c.V + j, ud(gen)), q.get(r * c.V + j));
      for (int64_t j = 0; j < c.V; ++j) q.set(r * c.V + j, q.get(r * c.V + j) / s);
      int64_t t = static_cast<int64_t>(ud(gen) * static_cast<double>(c.V)) % c.V;
      // a target the masks hide would make the loss +inf; keep it visible
      while ((c.add_mask && (r * c.V + t) % 11 == 3) || (c.bool_mask && (r * c.V + t) % 13 == 5)) {
        t = (t + 1) % c.V;
      }
      y[static_cast<size_t>(r)] = t;
      if (c.all_ignored || (c.ignore_every > 0 && r % c.ignore_every == 1)) {
        y[static_cast<size_t>(r)] = -100;
      }
    }
    if (c.specials) {
      x.set(0 * c.V + c.V / 2, kNan);
      x.set(1 * c.V + c.V - 1, kInf);
      for (int64_t j = 0; j < c.V; ++j) x.set(2 * c.V + j, -kInf);
    }
  }
  TensorView index_view() const { return smax::make_index_view(y.data(), {static_cast<int64_t>(y.size())}); }
};

// Every output of one call (one rank's copy of the replicated ones).
struct Outs {
  Dense dst, z, lse, ent, tlp, acc;
  Outs(const Case& c)
      : dst(DType::kF32, c.red == Reduction::kNone ? c.R : 1, 1, 7.0),
        z(DType::kF32, c.red == Reduction::kNone ? c.R : 1, 1, 7.0),
        lse(DType::kF32, c.R, 1, 7.0), ent(DType::kF32, c.R, 1, 7.0),
        tlp(DType::kF32, c.R, 1, 7.0), acc(DType::kF32, c.red == Reduction::kNone ? c.R : 1, 1, 7.0) {}
  TensorView red_view(const Dense& d, const Case& c) const {
    return c.red == Reduction::kNone ? d.rows_view() : d.shard(0, 1);
  }
  bool same_bits(const Outs& o) const {
    return dst.same_bits(o.dst) && z.same_bits(o.z) && lse.same_bits(o.lse) &&
           ent.same_bits(o.ent) && tlp.same_bits(o.tlp) && acc.same_bits(o.acc);
  }
};

CrossEntropyOptions ce_options(const Case& c, const Inputs& in, Outs& o, int64_t off, int64_t n,
                               const Dense* grad) {
  CrossEntropyOptions ce;
  ce.label_smoothing = c.a;
  ce.lse_square_scale = c.zs;
  ce.softcap = c.cap;
  ce.loss.reduction = c.red;
  ce.loss.empty_mean = c.empty_mean;
  if (c.weights) {  // this shard's class weights [n]
    const int64_t shape[1] = {n}, strides[1] = {1};
    ce.loss.weight =
        smax::make_view(const_cast<void*>(in.w.at(off)), DType::kF32, 1, shape, strides);
  }
  if (c.outputs) {
    ce.z_loss = o.red_view(o.z, c);
    ce.lse = o.lse.rows_view();
    ce.entropy = o.ent.rows_view();
    ce.target_logprob = o.tlp.rows_view();
    ce.accuracy = o.red_view(o.acc, c);
  }
  if (grad != nullptr) ce.grad = grad->shard(off, n);
  return ce;
}

SoftmaxOptions sm_options(const Case& c, const Inputs& in, int64_t off, int64_t n) {
  SoftmaxOptions o;
  o.scale = c.scale;
  o.temperature = c.temperature;
  o.empty_row = c.empty_row;
  o.threads = c.threads;
  if (c.add_mask) o.additive_mask = in.add.shard(off, n);
  if (c.bool_mask) {
    o.bool_mask = smax::make_bool_view(in.keep.data() + off, {c.R, n}, {c.V, 1});
  }
  return o;
}

// Runs the case on `sizes`; returns rank 0's outputs and the gradient,
// after checking that every rank wrote the same replicated bits.
struct Result {
  Outs outs;
  Dense grad;
};
Result run_sharded(const Case& c, const Inputs& in, const std::vector<int64_t>& sizes) {
  const int P = static_cast<int>(sizes.size());
  const auto off = offsets_of(sizes);
  std::vector<Outs> outs(P, Outs(c));
  Dense grad = c.in_place ? in.x : Dense(c.dt, c.R, c.V, 7.0);
  Dense x = in.x;  // in place: the gradient overwrites `grad`, the copy of x
  run_ok(P, [&](Communicator& comm, int k) {
    const Dense* g = c.fused ? &grad : nullptr;
    CrossEntropyOptions ce = ce_options(c, in, outs[k], off[k], sizes[k], g);
    const TensorView src = c.in_place ? grad.shard(off[k], sizes[k]) : x.shard(off[k], sizes[k]);
    const TensorView target = c.probs ? in.q.shard(off[k], sizes[k]) : in.index_view();
    smax::distributed::cross_entropy(comm, src, target, outs[k].red_view(outs[k].dst, c), ce,
                                     sm_options(c, in, off[k], sizes[k]));
  });
  for (int k = 1; k < P; ++k) {
    EXPECT_TRUE(outs[k].same_bits(outs[0])) << c.name() << ": rank " << k << " differs";
  }
  return {outs[0], grad};
}

Result run_single(const Case& c, const Inputs& in) {
  Outs outs(c);
  Dense grad = c.in_place ? in.x : Dense(c.dt, c.R, c.V, 7.0);
  const Dense* g = c.fused ? &grad : nullptr;
  CrossEntropyOptions ce = ce_options(c, in, outs, 0, c.V, g);
  const TensorView src = c.in_place ? grad.full() : in.x.full();
  const TensorView target = c.probs ? in.q.full() : in.index_view();
  smax::cross_entropy(src, target, outs.red_view(outs.dst, c), ce, sm_options(c, in, 0, c.V));
  return {outs, grad};
}

void expect_within(double got, double want, double tol, const std::string& what) {
  // A bound that is not finite (a special row: L = -inf, the scales inf or
  // NaN) asks for the exact value.
  if (!std::isfinite(tol)) tol = 0.0;
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
  } else if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, tol) << what;
  }
}

// The logits as f32, the oracle's input: exact for bf16 / f16; f64 logits
// are rounded (the oracle then gives only the error scales, and the values
// come from the single-process float64 op, itself within 1e-14 F of exact
// arithmetic: tests/test_cross_entropy_f64.cc).
Dense as_f32(const Dense& x) {
  if (x.dtype() == DType::kF32) return x;
  Dense out(DType::kF32, x.rows(), x.cols());
  for (int64_t i = 0; i < x.rows() * x.cols(); ++i) out.set(i, x.get(i));
  return out;
}

// Sharded result vs the float64 oracle on the whole row (the bounds at the
// top of cross_entropy_sharded.cc).
void check_against_oracle(const Case& c, const Inputs& in, const Result& got,
                          const std::string& what, const Result* one) {
  Outs dummy(c);
  const CrossEntropyOptions ce = ce_options(c, in, dummy, 0, c.V, nullptr);
  const SoftmaxOptions o = sm_options(c, in, 0, c.V);
  const TensorView target = c.probs ? in.q.full() : in.index_view();
  const Dense x32 = as_f32(in.x);
  ref::CrossEntropyRef want = ref::cross_entropy(x32.full(), target, ce, o);
  // f64 logits: the float64 bound 1e-14 F (losses.h; F = 1 + softcap + (1 +
  // 1 / softcap) max |u| with a softcap), twice (the oracle is float64
  // too), and no exchange term (the record is exact); else the f32 bounds.
  const bool f64 = c.dt == DType::kF64;
  double umax = 0.0;
  for (int64_t i = 0; i < c.R * c.V; ++i) {
    const double u = std::fabs(in.x.get(i) * c.scale / c.temperature);
    if (std::isfinite(u)) umax = std::max(umax, u);
  }
  const double F = c.cap > 0 ? 1 + c.cap + (1 + 1 / c.cap) * umax : 1.0;
  auto E = [&](double f32_eps) { return f64 ? 2e-14 * F : f32_eps; };
  const double X = f64 ? 0.0 : kX;
  const double eps = E(4e-6 + kX);
  if (f64) {  // values from the single-process op (f32 outputs: 2^-23 more below)
    for (int64_t r = 0; r < c.R; ++r) {
      if (c.red == Reduction::kNone) {
        want.loss.rows[r] = one->outs.dst.get(r);
        if (c.outputs) want.z[r] = one->outs.z.get(r), want.accuracy[r] = one->outs.acc.get(r);
      }
      if (c.outputs) {
        want.lse[r] = one->outs.lse.get(r);
        want.entropy[r] = one->outs.ent.get(r);
        want.target_logprob[r] = one->outs.tlp.get(r);
      }
    }
  }
  std::vector<double> mag(want.loss.rows_mag.size());
  for (size_t r = 0; r < mag.size(); ++r) mag[r] = std::fabs(want.loss.rows_mag[r]);
  if (c.red == Reduction::kNone) {
    for (int64_t r = 0; r < c.R; ++r) {
      expect_within(got.outs.dst.get(r), want.loss.rows[r],
                    eps * mag[r] + (f64 ? 0x1p-23 * std::fabs(want.loss.rows[r]) : 0.0) + 1e-30,
                    what + " loss row " + std::to_string(r));
    }
  } else {
    const double v = f64 ? one->outs.dst.get(0) : want.loss.reduce(want.loss.rows);
    expect_within(got.outs.dst.get(0), v,
                  eps * std::fabs(want.loss.reduce(mag)) + std::ldexp(std::fabs(v), -23) + 1e-30,
                  what + " reduced loss");
  }
  if (!c.outputs) return;
  for (int64_t r = 0; r < c.R; ++r) {
    const double L = want.lse[r];
    // (+ the f32 output's rounding: outputs are f32 whatever the logits)
    const double o = f64 ? 0x1p-23 : 0.0;
    expect_within(got.outs.lse.get(r), L, E(2e-6) * (1 + std::fabs(L)) + X + o * std::fabs(L),
                  what + " lse");
    expect_within(got.outs.ent.get(r), want.entropy[r],
                  E(4e-6) * want.entropy_mag[r] + 2 * X * (1 + std::fabs(L) + want.t_max[r]) +
                      o * std::fabs(want.entropy[r]),
                  what + " entropy");
    expect_within(got.outs.tlp.get(r), want.target_logprob[r],
                  E(2e-6) * want.target_logprob_mag[r] + X + o * std::fabs(want.target_logprob[r]),
                  what + " target_logprob");
  }
  // z: 4e-6 |z| (1 + |L|) / |L| (+ 2^-24 in L: 2 |z| / |L| 2^-24).
  std::vector<double> zb(static_cast<size_t>(c.R));
  for (int64_t r = 0; r < c.R; ++r) {
    const double L = std::fabs(want.lse[r]);
    zb[r] = L > 0 && std::isfinite(L) && std::isfinite(want.z[r])
                ? (E(4e-6) * (1 + L) + 2 * X) * std::fabs(want.z[r]) / L +
                      (f64 ? 0x1p-23 * std::fabs(want.z[r]) : 0.0)
                : 0.0;
  }
  if (c.red == Reduction::kNone) {
    for (int64_t r = 0; r < c.R; ++r) {
      expect_within(got.outs.z.get(r), want.z[r], zb[r] + 1e-30, what + " z");
      expect_within(got.outs.acc.get(r), want.accuracy[r], 0.0, what + " accuracy");
    }
  } else {
    const double zv = f64 ? one->outs.z.get(0) : want.loss.reduce(want.z);
    expect_within(got.outs.z.get(0), zv,
                  std::fabs(want.loss.reduce(zb)) + std::ldexp(std::fabs(zv), -23) + 1e-30,
                  what + " z_loss");
    double count = 0;
    for (int64_t r = 0; r < c.R; ++r) count += want.loss.active[r] ? 1 : 0;
    const double av = f64 ? one->outs.acc.get(0) : want.loss.reduce_with(want.accuracy, count);
    expect_within(got.outs.acc.get(0), av, std::ldexp(std::fabs(av), -23), what + " accuracy");
  }
  if (!c.fused) return;
  // The fused gradient: the backward's bound with dloss = 1.
  Dense ones(DType::kF32, c.red == Reduction::kNone ? c.R : 1, 1, 1.0);
  const ref::GradRef gw = ref::cross_entropy_backward(
      x32.full(), target, c.red == Reduction::kNone ? ones.rows_view() : ones.shard(0, 1), ce, o);
  for (int64_t i = 0; i < c.R * c.V; ++i) {
    const double u = std::fabs(in.x.get(i) * c.scale / c.temperature);
    double f = 1.0 + (c.cap > 0 ? u / c.cap : 0.0);
    if (!gw.t_round.empty()) f += gw.t_round[i];
    // a narrow gradient adds its rounding: half an ulp, or half the least
    // f16 subnormal (2^-25) below f16's normal range
    const double narrow = c.dt == DType::kBF16 ? 0x1p-8 * std::fabs(gw.dsrc[i])
                          : c.dt == DType::kF16 ? 0x1p-11 * std::fabs(gw.dsrc[i]) + 0x1p-25
                                                : 0.0;
    const double ge = f64 ? 2e-14 * F : 4e-6 * f + kX;
    expect_within(got.grad.get(i), f64 ? one->grad.get(i) : gw.dsrc[i],
                  ge * gw.mag[i] + narrow + 1e-30,
                  what + " grad " + std::to_string(i));
  }
}

void check_case(const Case& c) {
  const Inputs in(c);
  const Result one = run_single(c, in);
  for (const auto& sizes : layouts_for(c.V)) {
    const std::string what = c.name() + " P=" + std::to_string(sizes.size());
    const Result got = run_sharded(c, in, sizes);
    if (sizes.size() == 1) {
      EXPECT_TRUE(got.outs.same_bits(one.outs)) << what << " (one rank: bit-equal)";
      EXPECT_TRUE(got.grad.same_bits(one.grad)) << what << " grad (one rank: bit-equal)";
      continue;
    }
    check_against_oracle(c, in, got, what, &one);
  }
}

TEST(DistributedCrossEntropy, PlainClassIndexTargets) {
  for (Reduction red : {Reduction::kNone, Reduction::kSum, Reduction::kMean}) {
    Case c;
    c.red = red;
    check_case(c);
  }
}

TEST(DistributedCrossEntropy, EveryOptionAlone) {
  auto run = [](auto set) {
    Case c;
    set(c);
    check_case(c);
  };
  run([](Case& c) { c.weights = true; });
  run([](Case& c) { c.a = 0.1f; });
  run([](Case& c) { c.zs = 1e-2f; });
  run([](Case& c) { c.cap = 5.0f; });
  run([](Case& c) { c.ignore_every = 3; });
  run([](Case& c) { c.probs = true; });
  run([](Case& c) { c.add_mask = true; });
  run([](Case& c) { c.bool_mask = true; });
  run([](Case& c) { c.scale = 1.5f, c.temperature = 0.75f; });
  run([](Case& c) { c.outputs = false; });
  run([](Case& c) { c.fused = false; });
  run([](Case& c) { c.in_place = true; });
}

TEST(DistributedCrossEntropy, Combinations) {
  for (bool probs : {false, true}) {
    for (Reduction red : {Reduction::kNone, Reduction::kMean}) {
      Case c;
      c.probs = probs;
      c.red = red;
      c.weights = true;
      c.a = 0.2f;
      c.zs = 1e-3f;
      c.cap = 8.0f;
      c.add_mask = true;
      c.bool_mask = true;
      c.ignore_every = 4;
      c.scale = 1.25f;
      check_case(c);
      c.cap = 0.0f;
      check_case(c);
    }
  }
}

TEST(DistributedCrossEntropy, EveryLogitsDtype) {
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF64}) {
    for (bool probs : {false, true}) {
      Case c;
      c.dt = dt;
      c.probs = probs;
      c.a = 0.05f;
      c.weights = true;
      check_case(c);
      c.in_place = true;
      check_case(c);
    }
  }
}

TEST(DistributedCrossEntropy, SpecialRowsAndIgnoredRows) {
  for (smax::EmptyRow er : {smax::EmptyRow::kZero, smax::EmptyRow::kNan}) {
    for (DType dt : {DType::kF32, DType::kF64}) {
      Case c;
      c.dt = dt;
      c.specials = true;
      c.empty_row = er;
      c.red = Reduction::kNone;
      check_case(c);
      c.probs = true;
      check_case(c);
    }
  }
  for (EmptyMean em : {EmptyMean::kNan, EmptyMean::kZero}) {
    Case c;
    c.all_ignored = true;
    c.empty_mean = em;
    c.weights = true;
    check_case(c);
  }
}

TEST(DistributedCrossEntropy, ARankOwningNoTarget) {
  // Every target in the first 5 classes: the other ranks own none.
  Case c;
  c.weights = true;
  c.outputs = true;
  Inputs in(c);
  for (auto& t : in.y) t = t % 5;
  const std::vector<int64_t> sizes = {5, 20, 0, 12};
  const Result got = run_sharded(c, in, sizes);
  check_against_oracle(c, in, got, "targets on rank 0", nullptr);
}

TEST(DistributedCrossEntropy, BitsDoNotDependOnThreads) {
  Case c;
  c.R = 200;
  c.V = 3001;
  c.a = 0.1f;
  c.weights = true;
  std::optional<Result> first;
  for (int threads : {1, 2, 3}) {
    c.threads = threads;
    const Inputs in(c);
    const Result got = run_sharded(c, in, {1000, 2001});
    if (!first) {
      first = got;
    } else {
      EXPECT_TRUE(got.outs.same_bits(first->outs)) << threads;
      EXPECT_TRUE(got.grad.same_bits(first->grad)) << threads;
    }
  }
}

// Chunks of a few rows (many allgathers per call) give the bits of the
// default chunking: each row is merged on its own.
TEST(DistributedCrossEntropy, BitsDoNotDependOnTheChunking) {
  Case c;
  c.R = 131;
  c.V = 3001;
  c.a = 0.1f;
  c.weights = true;
  const Inputs in(c);
  std::optional<Result> first;
  for (int64_t chunk : {int64_t{0}, int64_t{4096}, int64_t{100000}}) {
    smax::detail::dist::set_chunk_bytes(chunk);
    const Result got = run_sharded(c, in, {1000, 0, 2001});
    if (!first) {
      first = got;
    } else {
      EXPECT_TRUE(got.outs.same_bits(first->outs)) << chunk;
      EXPECT_TRUE(got.grad.same_bits(first->grad)) << chunk;
    }
  }
  smax::detail::dist::set_chunk_bytes(0);
}

TEST(DistributedCrossEntropy, Backward) {
  for (bool probs : {false, true}) {
    for (Reduction red : {Reduction::kNone, Reduction::kSum, Reduction::kMean}) {
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF64}) {
        Case c;
        c.probs = probs;
        c.red = red;
        c.dt = dt;
        c.weights = true;
        c.a = 0.1f;
        c.zs = 1e-3f;
        c.cap = probs ? 0.0f : 6.0f;
        c.ignore_every = 3;
        c.add_mask = true;
        const Inputs in(c);
        Dense dloss(DType::kF32, red == Reduction::kNone ? c.R : 1, 1);
        for (int64_t i = 0; i < dloss.rows(); ++i) dloss.set(i, 0.5 + 0.25 * i);
        const TensorView dl = red == Reduction::kNone ? dloss.rows_view() : dloss.shard(0, 1);
        Outs dummy(c);
        const CrossEntropyOptions ce = [&] {
          CrossEntropyOptions e = ce_options(c, in, dummy, 0, c.V, nullptr);
          e.z_loss.reset(), e.lse.reset(), e.entropy.reset(), e.target_logprob.reset(),
              e.accuracy.reset();
          return e;
        }();
        const TensorView target = c.probs ? in.q.full() : in.index_view();
        Dense want(c.dt, c.R, c.V, 7.0);
        smax::cross_entropy_backward(in.x.full(), target, dl, want.full(), ce,
                                     sm_options(c, in, 0, c.V));
        const Dense x32 = as_f32(in.x);
        const ref::GradRef gw =
            ref::cross_entropy_backward(x32.full(), target, dl, ce, sm_options(c, in, 0, c.V));
        for (const auto& sizes : layouts_for(c.V)) {
          const auto off = offsets_of(sizes);
          Dense got(c.dt, c.R, c.V, 7.0);
          run_ok(static_cast<int>(sizes.size()), [&](Communicator& comm, int k) {
            CrossEntropyOptions e = ce;
            if (c.weights) {
              const int64_t shape[1] = {sizes[k]}, strides[1] = {1};
              e.loss.weight = smax::make_view(const_cast<void*>(in.w.at(off[k])), DType::kF32, 1,
                                              shape, strides);
            }
            smax::distributed::cross_entropy_backward(
                comm, in.x.shard(off[k], sizes[k]),
                c.probs ? in.q.shard(off[k], sizes[k]) : in.index_view(), dl,
                got.shard(off[k], sizes[k]), e, sm_options(c, in, off[k], sizes[k]));
          });
          const std::string what = c.name() + " backward P=" + std::to_string(sizes.size());
          if (sizes.size() == 1) {
            EXPECT_TRUE(got.same_bits(want)) << what;
            continue;
          }
          const double narrow = dt == DType::kBF16 ? 0x1p-8 : 0.0;
          double umax = 0.0;
          for (int64_t i = 0; i < c.R * c.V; ++i) {
            umax = std::max(umax, std::fabs(in.x.get(i) * c.scale / c.temperature));
          }
          const double F = c.cap > 0 ? 1 + c.cap + (1 + 1 / c.cap) * umax : 1.0;
          for (int64_t i = 0; i < c.R * c.V; ++i) {
            const double u = std::fabs(in.x.get(i) * c.scale / c.temperature);
            double f = 1.0 + (c.cap > 0 ? u / c.cap : 0.0);
            if (!gw.t_round.empty()) f += gw.t_round[i];
            const double ge = dt == DType::kF64 ? 2e-14 * F : 4e-6 * f + kX;
            expect_within(got.get(i), dt == DType::kF64 ? want.get(i) : gw.dsrc[i],
                          ge * gw.mag[i] + narrow * std::fabs(gw.dsrc[i]) + 1e-30,
                          what + " " + std::to_string(i));
          }
        }
      }
    }
  }
}

// ---- errors ------------------------------------------------------------------

TEST(DistributedCrossEntropy, TargetOutsideTheVocabularyFailsEveryRank) {
  Case c;
  const Inputs in0(c);
  Inputs in = in0;
  in.y[2] = c.V;  // a valid local index on no rank, outside [0, V)
  const std::vector<int64_t> sizes = {20, c.V - 20};
  const auto off = offsets_of(sizes);
  std::vector<Outs> outs(2, Outs(c));
  const auto errors = run_ranks(2, [&](Communicator& comm, int k) {
    CrossEntropyOptions ce = ce_options(c, in, outs[k], off[k], sizes[k], nullptr);
    smax::distributed::cross_entropy(comm, in.x.shard(off[k], sizes[k]), in.index_view(),
                                     outs[k].red_view(outs[k].dst, c), ce);
  });
  for (const auto& e : errors) {
    EXPECT_NE(message_of(e).find("target 37 (row 2) is outside [0, 37)"), std::string::npos)
        << message_of(e);
  }
  for (const auto& o : outs) EXPECT_EQ(o.dst.get(0), 7.0);
}

TEST(DistributedCrossEntropy, OneRanksBadArgumentFailsEveryRank) {
  Case c;
  const Inputs in(c);
  const std::vector<int64_t> sizes = {10, 10, c.V - 20};
  const auto off = offsets_of(sizes);
  std::vector<Outs> outs(3, Outs(c));
  Dense grad(DType::kF32, c.R, c.V, 7.0);
  const auto errors = run_ranks(3, [&](Communicator& comm, int k) {
    CrossEntropyOptions ce = ce_options(c, in, outs[k], off[k], sizes[k], &grad);
    if (k == 2) {  // weights of the wrong length
      const int64_t shape[1] = {sizes[k] + 1}, strides[1] = {1};
      ce.loss.weight = smax::make_view(const_cast<void*>(in.w.at(0)), DType::kF32, 1, shape,
                                       strides);
    }
    smax::distributed::cross_entropy(comm, in.x.shard(off[k], sizes[k]), in.index_view(),
                                     outs[k].red_view(outs[k].dst, c), ce);
  });
  EXPECT_NE(message_of(errors[2]).find("weight shape"), std::string::npos) << message_of(errors[2]);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(message_of(errors[k]),
              "cross_entropy (vocab-parallel): rank 2 rejected its arguments (see that rank's "
              "error)");
  }
  for (int64_t i = 0; i < c.R * c.V; ++i) EXPECT_EQ(grad.get(i), 7.0);
  for (const auto& o : outs) EXPECT_EQ(o.dst.get(0), 7.0);
}

TEST(DistributedCrossEntropy, MismatchedOptionsOrTargetsFailEveryRankNamingThem) {
  Case c;
  const Inputs in(c);
  const std::vector<int64_t> sizes = {18, c.V - 18};
  const auto off = offsets_of(sizes);
  auto run = [&](const std::function<void(CrossEntropyOptions&, std::vector<int64_t>&, int)>& tweak,
                 const std::string& expect) {
    std::vector<Outs> outs(2, Outs(c));
    const auto errors = run_ranks(2, [&](Communicator& comm, int k) {
      CrossEntropyOptions ce = ce_options(c, in, outs[k], off[k], sizes[k], nullptr);
      std::vector<int64_t> y = in.y;
      tweak(ce, y, k);
      smax::distributed::cross_entropy(comm, in.x.shard(off[k], sizes[k]),
                                       smax::make_index_view(y.data(), {c.R}),
                                       outs[k].red_view(outs[k].dst, c), ce);
    });
    for (const auto& e : errors) {
      EXPECT_NE(message_of(e).find(expect), std::string::npos) << message_of(e);
    }
    for (const auto& o : outs) EXPECT_EQ(o.dst.get(0), 7.0);
  };
  run([](CrossEntropyOptions& ce, std::vector<int64_t>&, int k) {
        if (k == 1) ce.label_smoothing = 0.1f;
      },
      "cross_entropy (vocab-parallel): ranks disagree on label_smoothing");
  run([](CrossEntropyOptions& ce, std::vector<int64_t>&, int k) {
        if (k == 1) ce.entropy.reset();
      },
      "ranks disagree on optional arguments given");
  run([](CrossEntropyOptions&, std::vector<int64_t>& y, int k) {
        if (k == 0) y[3] = (y[3] + 1) % 37;
      },
      "ranks disagree on targets (checksum)");
  run([](CrossEntropyOptions& ce, std::vector<int64_t>&, int k) {
        if (k == 0) ce.loss.reduction = Reduction::kSum;
      },
      "ranks disagree on reduction");
}

// With softcap, accuracy compares capped float64 logits when an additive mask
// is given and u otherwise: a mask on some ranks only would compare the two
// kinds across ranks, so the ranks must agree (an all-zero mask elsewhere).
TEST(DistributedCrossEntropy, SoftcapWithAMaskOnSomeRanksOnlyFailsEveryRank) {
  Case c;
  const Inputs in(c);
  const std::vector<int64_t> sizes = {18, c.V - 18};
  const auto off = offsets_of(sizes);
  std::vector<float> zeros(static_cast<size_t>(c.R * sizes[0]), 0.0f);
  std::vector<Outs> outs(2, Outs(c));
  const auto errors = run_ranks(2, [&](Communicator& comm, int k) {
    CrossEntropyOptions ce = ce_options(c, in, outs[k], off[k], sizes[k], nullptr);
    ce.softcap = 5.0f;
    smax::SoftmaxOptions o;
    if (k == 0) o.additive_mask = smax::make_view(zeros.data(), {c.R, sizes[0]});
    smax::distributed::cross_entropy(comm, in.x.shard(off[k], sizes[k]), in.index_view(),
                                     outs[k].red_view(outs[k].dst, c), ce, o);
  });
  for (const auto& e : errors) {
    EXPECT_NE(message_of(e).find("ranks disagree on additive_mask given (with softcap > 0)"),
              std::string::npos)
        << message_of(e);
  }
  for (const auto& o : outs) EXPECT_EQ(o.dst.get(0), 7.0);
}

}  // namespace
