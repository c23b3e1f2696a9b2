// src/ops/distributed/xent_merge.h: the per-row record of the sharded
// cross-entropies (cross_entropy_sharded.cc; the sharded linear
// cross-entropy uses the same), its packing into the allgather's floats, the
// merge of every rank's record in rank order (float64), and the row's global
// loss terms and gradient coefficient from the merged record.
//
// A rank's partial of a row (XentPartial) describes its shard only:
//  * (ref, d): the online state, sum over the shard of e^(t_j - ref) = d
//    (ref = -inf, d = 0 for an empty or fully masked shard; d NaN when the
//    shard holds NaN or +inf). ref is an f32 value sent as f32 and d is sent
//    as f32 (one rounding, 2^-24 relative); in the float64 mode (f64
//    logits) both are doubles, exactly;
//  * t_y, w_y: the target's logit and class weight, from the rank that owns
//    the target (others send 0; the merge reads the owner's);
//  * sum_t, sum_w (label smoothing), sum_et (entropy, relative to ref), the
//    probability-target sums (kernels::XentProbSums' six), and for accuracy
//    the shard's best logit value with a hit flag (the shard's first argmax
//    is the target, or is the first argmax of q).
// XentFields says which fields travel (the same on every rank: it is derived
// from options every rank agreed on). Floats per row: 2 (ref, d) + target
// (1, or 2 as a float64 with softcap or f64 logits) + weight 2 + smoothing 4
// + entropy 2 + accuracy 3 (+1 with probability targets) + probabilities 12;
// the float64 mode sends ref and d as 2 each and q's best as 2. Float64 fields travel as their exact bit
// pattern in two float slots, so nothing but d is rounded.
//
// The merge (identical arithmetic on every rank, so replicated outputs are
// bit-identical): M = max_k ref_k, D = sum_k d_k e^(ref_k - M) in rank order
// (ranks with ref_k = -inf skipped), L = M + log D; NaN in any d_k makes the
// row NaN; D = 0 (every entry of every shard masked) makes it empty. Sums
// are added in rank order. The entropy is H = log D - E / D with
// E = sum_k e^(ref_k - M) (sum_et_k + d_k (ref_k - M)).
// Accuracy: the global first argmax lies on the first rank whose best value
// equals the largest best value (shards are in class order).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cross_entropy.h"

namespace smax::detail::dist {

/// Which fields a row's record carries.
struct XentFields {
  bool f64 = false;         ///< float64 logits: ref, d, t_y and q's best as doubles
  bool target = true;       ///< class-index targets: t_y from the owner
  bool target_f64 = false;  ///< t_y as a float64 (softcap: not an f32 value)
  bool weight = false;      ///< class weights with class-index targets: w_y
  bool smoothing = false;   ///< sum_t, sum_w
  bool entropy = false;     ///< sum_et
  bool accuracy = false;    ///< best value, hit flag (+ q's best with probabilities)
  bool probs = false;       ///< probability targets: the six sums

  int floats() const {
    int n = f64 ? 4 : 2;
    if (target) n += (target_f64 || f64) ? 2 : 1;
    if (weight) n += 2;
    if (smoothing) n += 4;
    if (entropy) n += 2;
    if (accuracy) n += 3 + (probs ? (f64 ? 2 : 1) : 0);
    if (probs) n += 12;
    return n;
  }
};

/// One rank's partial of one row (see the top of this file).
struct XentPartial {
  double ref = -std::numeric_limits<double>::infinity();  ///< an f32 value unless f64
  double d = 0.0;
  double ty = 0.0;  ///< owner only
  double wy = 0.0;  ///< owner only
  double sum_t = 0.0, sum_w = 0.0, sum_et = 0.0;
  double best = -std::numeric_limits<double>::infinity();  ///< accuracy
  double q_best = -std::numeric_limits<double>::infinity();  ///< accuracy, probabilities
  bool hit = false;                                         ///< accuracy
  kernels::XentProbSums ps;                                 ///< probabilities
};

namespace xent_detail {
inline void put_f64(float*& p, double v) {
  std::memcpy(p, &v, sizeof v);
  p += 2;
}
inline double get_f64(const float*& p) {
  double v;
  std::memcpy(&v, p, sizeof v);
  p += 2;
  return v;
}
}  // namespace xent_detail

/// Writes f.floats() values at out.
inline void pack(const XentFields& f, const XentPartial& x, float* out) {
  using xent_detail::put_f64;
  float* p = out;
  if (f.f64) {
    put_f64(p, x.ref);
    put_f64(p, x.d);
  } else {
    *p++ = static_cast<float>(x.ref);  // an f32 value: exact
    *p++ = static_cast<float>(x.d);
  }
  if (f.target) {
    if (f.target_f64 || f.f64) {
      put_f64(p, x.ty);
    } else {
      *p++ = static_cast<float>(x.ty);  // an f32 value (no softcap): exact
    }
  }
  if (f.weight) put_f64(p, x.wy);
  if (f.smoothing) {
    put_f64(p, x.sum_t);
    put_f64(p, x.sum_w);
  }
  if (f.entropy) put_f64(p, x.sum_et);
  if (f.accuracy) {
    put_f64(p, x.best);
    *p++ = x.hit ? 1.0f : 0.0f;
    if (f.probs && f.f64) put_f64(p, x.q_best);
    if (f.probs && !f.f64) *p++ = static_cast<float>(x.q_best);  // an f32 value
  }
  if (f.probs) {
    put_f64(p, x.ps.qt);
    put_f64(p, x.ps.q);
    put_f64(p, x.ps.q_masked);
    put_f64(p, x.ps.wqt);
    put_f64(p, x.ps.wq);
    put_f64(p, x.ps.wq_masked);
  }
}

/// Reads what pack wrote.
inline XentPartial unpack(const XentFields& f, const float* in) {
  using xent_detail::get_f64;
  const float* p = in;
  XentPartial x;
  if (f.f64) {
    x.ref = get_f64(p);
    x.d = get_f64(p);
  } else {
    x.ref = static_cast<double>(*p++);
    x.d = static_cast<double>(*p++);
  }
  if (f.target) x.ty = (f.target_f64 || f.f64) ? get_f64(p) : static_cast<double>(*p++);
  if (f.weight) x.wy = get_f64(p);
  if (f.smoothing) {
    x.sum_t = get_f64(p);
    x.sum_w = get_f64(p);
  }
  if (f.entropy) x.sum_et = get_f64(p);
  if (f.accuracy) {
    x.best = get_f64(p);
    x.hit = *p++ != 0.0f;
    if (f.probs) x.q_best = f.f64 ? get_f64(p) : static_cast<double>(*p++);
  }
  if (f.probs) {
    x.ps.qt = get_f64(p);
    x.ps.q = get_f64(p);
    x.ps.q_masked = get_f64(p);
    x.ps.wqt = get_f64(p);
    x.ps.wq = get_f64(p);
    x.ps.wq_masked = get_f64(p);
  }
  return x;
}

/// A row after the merge of every rank's partial.
struct XentMerged {
  enum Kind { kFinite, kEmpty, kNaN } kind = kFinite;
  double M = 0.0;      ///< max_k ref_k (finite rows)
  float shift = 0.0f;  ///< M as f32 (exact in the f32 mode): the gradient's shift
  double D = 0.0;      ///< sum_k d_k e^(ref_k - M)
  double L = 0.0;      ///< M + log D (finite rows); -inf (empty); NaN (NaN rows)
  double H = 0.0;      ///< entropy (finite rows, fields.entropy)
  double ty = 0.0, wy = 0.0;  ///< the owner's t_y and w_y (1 without weights); 0 without owner
  double sum_t = 0.0, sum_w = 0.0;
  kernels::XentProbSums ps;
  bool hit = false;  ///< accuracy: the global argmax is the target (q's argmax)
};

/// Merges the records of one row: `records` points at rank 0's record of
/// the row, rank k's at records + k * stride (floats). `owner`: the rank
/// holding the row's target (-1: none, e.g. an ignored row or probability
/// targets).
inline XentMerged merge(const XentFields& f, const float* records, int64_t stride, int ranks,
                        int owner) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  XentMerged m;
  double M = -kInf;
  bool nan = false;
  for (int k = 0; k < ranks; ++k) {
    const XentPartial x = unpack(f, records + k * stride);
    if (std::isnan(x.d) || std::isnan(x.ref)) nan = true;
    if (x.ref > M) M = x.ref;
  }
  double D = 0.0, E = 0.0, best = -kInf, q_best = -kInf;
  int best_rank = -1, q_rank = -1;
  for (int k = 0; k < ranks; ++k) {
    const XentPartial x = unpack(f, records + k * stride);
    if (!nan && x.ref != -kInf && x.d != 0.0) {
      const double e = std::exp(x.ref - M);
      D += x.d * e;
      if (f.entropy) E += e * (x.sum_et + x.d * (x.ref - M));
    }
    if (f.smoothing) {
      m.sum_t += x.sum_t;
      m.sum_w += x.sum_w;
    }
    if (f.probs) {
      m.ps.qt += x.ps.qt;
      m.ps.q += x.ps.q;
      m.ps.q_masked += x.ps.q_masked;
      m.ps.wqt += x.ps.wqt;
      m.ps.wq += x.ps.wq;
      m.ps.wq_masked += x.ps.wq_masked;
    }
    if (f.accuracy) {
      if (best_rank < 0 || x.best > best) best = x.best, best_rank = k;
      if (f.probs && (q_rank < 0 || x.q_best > q_best)) q_best = x.q_best, q_rank = k;
    }
    if (k == owner) {
      m.ty = x.ty;
      m.wy = f.weight ? x.wy : 1.0;  // no class weights: w_y = 1
    }
  }
  if (f.accuracy && best_rank >= 0) {
    const XentPartial x = unpack(f, records + best_rank * stride);
    m.hit = x.hit && (!f.probs || q_rank == best_rank);
  }
  if (nan || M == kInf || std::isnan(D)) {
    m.kind = XentMerged::kNaN;
    m.L = std::numeric_limits<double>::quiet_NaN();
    return m;
  }
  if (D == 0.0) {
    m.kind = XentMerged::kEmpty;
    m.L = -kInf;
    return m;
  }
  m.M = M;
  m.shift = static_cast<float>(M);
  m.D = D;
  const double logd = std::log(D);
  m.L = M + logd;
  if (f.entropy) m.H = logd - E / D;
  return m;
}

/// The loss terms of an active finite row (include/smax/losses.h's
/// formulas; C = V, the classes of every rank): a = label_smoothing, zs =
/// lse_square_scale. Class-index targets use ty / wy; probability targets ps.
struct XentRowLoss {
  double loss = 0.0, z = 0.0, tlp = 0.0;
};
inline XentRowLoss row_loss(const XentMerged& m, bool probs, double a, double zs, double C) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  XentRowLoss r;
  const double L = m.L;
  if (probs) {
    const double b = 1.0 - a;
    r.loss = b * (m.ps.wq * L - m.ps.wqt);
    if (b != 0.0 && m.ps.wq_masked != 0.0) r.loss += b * m.ps.wq_masked * kInf;
    r.tlp = m.ps.qt - m.ps.q * L;
    if (m.ps.q_masked != 0.0) r.tlp -= m.ps.q_masked * kInf;
    r.z = zs * L * L;
  } else {
    const double c = (1.0 - a) * m.wy;
    if (c != 0.0) r.loss = c * (L - m.ty);
    r.z = zs * m.wy * L * L;
    r.tlp = m.ty - L;
  }
  if (a > 0.0) r.loss += a * (m.sum_w * L - m.sum_t) / C;
  r.loss += r.z;
  return r;
}

/// A, the coefficient of p_j in the gradient of an active finite row
/// (losses.h: dt_j = G (p_j A - w_j (a / C + (1 - a) q_j) - (1 - a) w_y [j == y])).
inline double grad_A(const XentMerged& m, bool probs, double a, double zs, double C) {
  double A;
  if (probs) {
    A = (1.0 - a) * (m.ps.wq + m.ps.wq_masked) + 2.0 * zs * m.L;
  } else {
    A = (1.0 - a) * m.wy + 2.0 * zs * m.wy * m.L;
  }
  if (a > 0.0) A += a / C * m.sum_w;
  return A;
}

}  // namespace smax::detail::dist
