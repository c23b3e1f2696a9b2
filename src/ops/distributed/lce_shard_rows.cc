// src/ops/distributed/lce_shard_rows.cc: the per-row algebra of the
// vocabulary-parallel linear cross-entropy (lce_shard_rows.h states the
// contract). The formulas are the single-process ones of
// ops/losses/linear_cross_entropy_tiles.cc / _backward.cc, written in the
// same order (so one rank gives the same bits), with the target, its class
// weight and C = V taken from the whole group instead of this shard.
#include "ops/distributed/lce_shard_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/convert.h"
#include "kernels/linear_cross_entropy.h"

namespace smax::detail::dist {

using lce::kInf;
using lce::kNan;

void put_record(const lce::RowStat& st, int64_t offset, double wy_here, double* out) {
  out[0] = st.m;
  out[1] = st.d;
  out[2] = st.s1;
  out[3] = st.sum_t;
  out[4] = st.sum_w;
  out[5] = st.best;
  out[6] = static_cast<double>(offset + st.arg);
  out[7] = st.ty;
  out[8] = wy_here;
  out[9] = st.nan ? 1.0 : 0.0;
}

void merge_record(lce::RowStat& st, const double* rec) {
  if (rec[9] != 0.0) {
    st.nan = true;
    return;
  }
  if (rec[5] > st.best) {
    st.best = rec[5];
    st.arg = static_cast<int64_t>(rec[6]);
  }
  st.sum_t += rec[3];
  st.sum_w += rec[4];
  const double d = rec[1];
  if (d == 0.0) return;
  const double ref = rec[0];
  if (st.d == 0.0) {
    st.m = ref;
    st.d = d;
    st.s1 = rec[2];
    return;
  }
  const double M = std::max(st.m, ref);
  const double f1 = std::exp(st.m - M), f2 = std::exp(ref - M);
  st.s1 = f1 * (st.s1 + (st.m - M) * st.d) + f2 * (rec[2] + (ref - M) * d);
  st.d = f1 * st.d + f2 * d;
  st.m = M;
}

lce::RowResult finalize_global(const lce::Setup& s, const GlobalRows& rows,
                               const lce::RowStat& rs, int64_t gr) {
  lce::RowResult o;
  const double C = static_cast<double>(rows.vocab);
  const bool empty = !rs.nan && rs.d == 0.0;
  if (rs.nan || (empty && s.empty_row == EmptyRow::kNan)) {
    o.L = o.H = o.loss = o.z = o.tlp = o.acc = kNan;
  } else if (!empty) {
    const double logd = std::log(rs.d);
    o.L = rs.m + logd;
    o.H = logd - rs.s1 / rs.d;
    if (rows.active[gr]) {
      const int64_t y = rows.y[gr];
      const double wy = rows.wy[gr];
      const double c = (1.0 - s.a) * wy;
      if (c != 0.0) o.loss = c * (o.L - rs.ty);
      o.z = s.zs * wy * o.L * o.L;
      o.tlp = rs.ty - o.L;
      o.acc = rs.arg == y ? 1.0 : 0.0;
      if (s.a > 0.0) o.loss += s.a * (rs.sum_w * o.L - rs.sum_t) / C;
      o.loss += o.z;
    }
  }
  return o;
}

void grad_row_shard(const lce::Setup& s, const GlobalRows& rows, float* row, int64_t vc,
                    int64_t v0, int64_t gr, int64_t y_local, double L, double sum_w, double g) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float ninf = -std::numeric_limits<float>::infinity();
  // lce::special_grad_row with the global active flag.
  if (!rows.active[gr]) {
    std::fill(row, row + vc, 0.0f);
    return;
  }
  if (L == -kInf) {
    std::fill(row, row + vc, s.empty_row == EmptyRow::kNan ? nan : 0.0f);
    return;
  }
  if (!std::isfinite(L) || std::isnan(g)) {
    for (int64_t j = 0; j < vc; ++j) row[j] = row[j] == ninf ? 0.0f : nan;
    return;
  }
  // lce::grad_coeffs with C = V and the global w_y.
  const double C = static_cast<double>(rows.vocab);
  const double wy = rows.wy[gr];
  double A = (1.0 - s.a) * wy + 2.0 * s.zs * wy * L;
  if (s.a > 0.0) A += s.a / C * sum_w;
  // lce::grad_row (f32).
  kernels::LceGrad k;
  k.softcap = s.cap;
  k.scale = s.scale;
  k.shift = static_cast<float>(L);
  k.factor = g * A * std::exp(static_cast<double>(k.shift) - L);
  k.b = static_cast<float>(g * s.a / C);
  k.weight = s.f32_ops.cw(v0);
  const bool has_y = y_local >= v0 && y_local < v0 + vc;
  const float uy = has_y ? row[y_local - v0] : 0.0f;
  kernels::lce_grad(row, vc, k);
  if (has_y && uy != ninf) {
    const double fix = static_cast<double>(s.scale) * lce::cap_deriv(s, uy) * g * (1.0 - s.a) * wy;
    row[y_local - v0] = static_cast<float>(static_cast<double>(row[y_local - v0]) - fix);
  }
}

void write_reduced_global(const lce::Setup& s, const GlobalRows& rows,
                          const std::vector<double>& values, double denominator,
                          const TensorView& v, const char* name) {
  if (s.reduction == Reduction::kNone) {
    std::vector<double> out(values.size());
    for (size_t r = 0; r < values.size(); ++r) out[r] = rows.active[r] ? values[r] : 0.0;
    lce::write_row_out(lce::row_view(s, v, name, true), out);
    return;
  }
  double sum = 0.0;
  for (size_t r = 0; r < values.size(); ++r) {
    if (rows.active[r]) sum += values[r];
  }
  if (s.reduction == Reduction::kMean) {
    if (denominator == 0.0) {
      sum = s.empty_mean == EmptyMean::kZero ? 0.0 : kNan;
    } else {
      sum /= denominator;
    }
  }
  store_f64(v.data, v.dtype, sum);
}

// ---- dhidden over the ranks -------------------------------------------------------

namespace {
// Floats of one round's slab (1 MiB per buffer: the reduction adds ~3.5 MiB).
constexpr int64_t kSlabFloats = int64_t{1} << 18;
}  // namespace

ReduceBuffers::ReduceBuffers(const char* op, int ranks, int64_t N, int64_t D) {
  if (ranks <= 1 || N == 0 || D == 0) return;
  const int64_t P = ranks;
  part = std::max<int64_t>(1, kSlabFloats / D / P);
  part = std::min(part, (N + P - 1) / P);
  slab = part * P;
  send = lce::alloc<float>(op, slab * D);
  recv = lce::alloc<float>(op, slab * D);
  mine = lce::alloc<float>(op, part * D);
  gathered = lce::alloc<float>(op, slab * D);
}

void reduce_rows(const Group& g, ReduceBuffers& b, float* data, int64_t ld, int64_t N,
                 int64_t D) {
  if (g.size <= 1 || N == 0 || D == 0) return;
  const int64_t P = g.size;
  const int64_t block = b.part * D;  // floats per rank per round
  const size_t bytes = static_cast<size_t>(block) * sizeof(float);
  for (int64_t s0 = 0; s0 < N; s0 += b.slab) {
    const int64_t rows = std::min(b.slab, N - s0);
    for (int64_t i = 0; i < b.slab; ++i) {
      float* dst = b.send.data() + i * D;
      if (i < rows) {
        std::memcpy(dst, data + (s0 + i) * ld, static_cast<size_t>(D) * sizeof(float));
      } else {
        std::fill(dst, dst + D, 0.0f);
      }
    }
    g.comm->alltoall(b.send.data(), b.recv.data(), bytes);
    // recv + k * block: rank k's partial of this rank's block, summed in rank order.
    for (int64_t e = 0; e < block; ++e) {
      double acc = 0.0;
      for (int64_t k = 0; k < P; ++k) acc += static_cast<double>(b.recv[k * block + e]);
      b.mine[e] = static_cast<float>(acc);
    }
    g.comm->allgather(b.mine.data(), b.gathered.data(), bytes);
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(data + (s0 + i) * ld, b.gathered.data() + i * D,
                  static_cast<size_t>(D) * sizeof(float));
    }
  }
}

}  // namespace smax::detail::dist
