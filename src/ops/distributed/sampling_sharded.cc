// src/ops/distributed/sampling_sharded.cc: the vocabulary-parallel
// softmax_topk and sample (include/smax/distributed.h; the single-process
// ops and their semantics: include/smax/sampling.h, docs/sampling.md).
//
// Both start with the handshake of group.h (row shape, axis, every option
// agreed; a rank's bad argument fails every rank), then run the local work
// of each row through Rowwise (the logit transform, masks, gathers and the
// fixed task grid of the single-process ops: thread-count independent) and
// exchange per-row records with allgathers; every rank merges the records
// in rank order, so every rank writes the same bits. Only f32 / bf16 / f16
// logits (f32 arithmetic, as the single-process op); float64 src is
// rejected (the single-process float64 rows are not sharded).
//
// softmax_topk. Each rank: topk_row (the single-process scan) on its shard,
// k' = min(k, n_k) candidates with GLOBAL indices, sorted as the op sorts
// (NaN > +inf > finite > -inf, ties by lower index), and the shard's online
// normaliser (ref, d) and NaN flag. The k best of the k' x P candidates by
// the same order are the global k best (each rank sent its own k best).
// Normaliser: M = max_k ref_k, D = sum_k d_k e^(ref_k - M) in float64, rank
// order (ranks with d_k = 0 skipped); p_j = e^(t_j - M) / D. Renormalised:
// the single-process float64 sum over the k winners (the same list, so the
// same bits). Exchanged per row and rank: 40 + 16 k bytes.
// Bound: the single-process bound |p - p_ref| <= 2e-6 p_ref + 1e-36 plus the
// merge: each d_k e^(ref_k - M) adds <= 2^-52 relative and the P-term
// float64 sum P 2^-53, i.e. < 1e-15 relative for any practical P; indices
// are exact (equal to the single-process op). With one rank M = ref and
// D = d exactly: bit-equal to smax::softmax_topk.
//
// sample. The Gumbel noise of global class j is g(seed, r, j) (the shard's
// offset is added to the local index), so the sampled index never depends on
// the number of ranks. By options (the same on every rank):
//  * greedy (T = 0): per row (NaN flag, max, first index of the max); the
//    first rank holding the global max gives the index. 24 bytes per row.
//  * no filter (top_p = 1, min_p = 0, top-k off or keeping every class):
//    each rank's pruned Gumbel-max over its shard (gumbel_argmax with the
//    offset) gives (NaN flag, t_j + g_j, j); the best wins (ties: lower
//    global index). 24 bytes per row.
//  * top-k on (K = max(top_k, min_tokens_to_keep) < V): each rank sends its
//    K best visible z (global indices; with top_k_ties = keep also its
//    entries tied with its K-th value), which contain the global top-K (and
//    its ties). Every rank runs the single-process filter chain
//    (sampling_filters.h: top-k, top-p, min-p, floors, float64 masses in
//    sorted order) on the merged candidates - the same sorted top-K set as
//    the single-process op, so the same decisions to the bit - and the
//    Gumbel-max over the kept list. 16 bytes per candidate + 16 per row.
//  * top-k off with min_p only: global max z0 (one record), then each rank
//    counts its entries with fl64(z - z0) >= fl64(log min_p); when the
//    global count reaches the floor min(min_tokens_to_keep, visible), the
//    masked shards' Gumbel-max as above, else the floor's best candidates.
//    Exact, the single-process decisions.
//  * top-k off with top_p < 1 (the nucleus over the whole vocabulary): the
//    single-process op's float64 normaliser depends on the summation order,
//    which would make the kept set depend on P. Here each mass is
//    q_j = floor(e^(z_j - z0) 2^64) (z0 the global max), summed EXACTLY in
//    128-bit integers (any order, any P: the same total Q), and the nucleus
//    is the shortest prefix (descending z, lower index first) with
//    double(sum q) >= double(top_p) * double(Q), found from the merged top-K
//    candidates with K = max(1024, min_tokens_to_keep), widened x8 until
//    the prefix is reached (or K >= visible). The kept set equals exact
//    arithmetic up to ~V 2^-64 + 2^-52 relative in the masses, so it equals
//    the single-process op except on rows whose cut lies within that op's
//    own error of top_p (1e-6 with top-k off: docs/sampling.md's "fragile"
//    rows); for every P (one rank included) the same token.
// Every decision above is made identically on every rank from the same
// merged records; the sampled index is then exact (float64 Gumbel-max).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/errors.h"
#include "core/rowwise.h"
#include "core/validate.h"
#include "kernels/sampling.h"
#include "ops/distributed/group.h"
#include "ops/sampling/sampling_filters.h"
#include "ops/sampling/sampling_rows.h"
#include "ops/sampling/sampling_topk.h"
#include "smax/distributed.h"

namespace smax::detail::dist {
namespace {

using kernels::TopkCandidate;

constexpr int64_t kFlagNaN = 1;  // the row holds NaN (or +inf, T > 0)
constexpr int64_t kFlagOom = 2;  // a rank could not allocate its candidates
// Nucleus without top-k: the first candidate count and the widening factor.
constexpr int64_t kNucleusFirstK = 1024;
constexpr int64_t kNucleusGrowth = 8;

int64_t as_i64(double v) { return bits(v); }
double as_f64(int64_t v) {
  double d;
  std::memcpy(&d, &v, sizeof d);
  return d;
}
int64_t as_i64(float v) { return bits(v); }
float as_f32(int64_t v) {
  const auto w = static_cast<int32_t>(v);
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

// The row geometry every rank must share: rank, axis and every non-axis dim.
// n (this rank's class count) is src's axis length, 0 when the axis is out
// of range (validation then rejects the call).
struct RowShape {
  int64_t n = 0;
  int64_t rows = 1;
  std::vector<Agreed> agreed;
};

RowShape row_shape(const TensorView& src, int64_t axis) {
  static const char* const kDimNames[kMaxRank] = {"dim 0", "dim 1", "dim 2", "dim 3",
                                                  "dim 4", "dim 5", "dim 6", "dim 7"};
  RowShape s;
  const int rank = src.rank;
  s.agreed.push_back({"src rank", rank});
  if (rank < 0 || rank > kMaxRank) return s;
  const int64_t a = rank == 0 ? 0 : (axis < 0 ? axis + rank : axis);
  s.agreed.push_back({"axis", a});
  if (rank == 0) {
    s.n = 1;
    return s;
  }
  if (a < 0 || a >= rank) return s;
  s.n = src.shape[a];
  for (int d = 0; d < rank; ++d) {
    const int64_t v = d == a ? 0 : src.shape[d];
    s.agreed.push_back({kDimNames[d], v});
    if (d != a) s.rows = v > 0 && s.rows <= INT64_MAX / v ? s.rows * v : (v > 0 ? -1 : 0);
  }
  return s;
}

void add_softmax_options(std::vector<Agreed>& a, const SoftmaxOptions& o) {
  a.push_back({"scale", bits(o.scale)});
  a.push_back({"temperature", bits(o.temperature)});
  a.push_back({"empty_row", static_cast<int64_t>(o.empty_row)});
  // Masks are per-class data of each shard: a rank may mask (e.g. padding
  // classes) where another has no mask at all.
}

void reject_f64(const Rowwise& rw, const char* op) {
  if (rw.any_input_f64()) {
    fail(op, "float64 src is not supported by the vocab-parallel op (f32, bf16 or f16 logits)");
  }
}

// ---- candidate lists -------------------------------------------------------

// Every rank's per-row candidate lists (global indices) and flags, merged in
// rank order: two allgathers (counts and flags, then the lists padded to the
// longest). `flags` becomes the OR over the ranks.
std::vector<std::vector<TopkCandidate>> exchange_lists(
    const Group& g, const std::vector<std::vector<TopkCandidate>>& mine,
    std::vector<int64_t>& flags) {
  const size_t rows = mine.size();
  std::vector<int64_t> head(2 * rows);
  for (size_t r = 0; r < rows; ++r) {
    head[2 * r] = static_cast<int64_t>(mine[r].size());
    head[2 * r + 1] = flags[r];
  }
  const std::vector<int64_t> heads = allgather_rows(g, head);
  int64_t longest = 0;
  for (size_t r = 0; r < rows; ++r) {
    flags[r] = 0;
    for (int k = 0; k < g.size; ++k) {
      longest = std::max(longest, heads[k * 2 * rows + 2 * r]);
      flags[r] |= heads[k * 2 * rows + 2 * r + 1];
    }
  }
  std::vector<std::vector<TopkCandidate>> merged(rows);
  if (longest == 0) return merged;
  const size_t L = static_cast<size_t>(longest);
  std::vector<int64_t> body(rows * L * 2, 0);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < mine[r].size(); ++j) {
      body[(r * L + j) * 2] = as_i64(mine[r][j].value);
      body[(r * L + j) * 2 + 1] = mine[r][j].index;
    }
  }
  const std::vector<int64_t> all = allgather_rows(g, body);
  for (size_t r = 0; r < rows; ++r) {
    size_t total = 0;
    for (int k = 0; k < g.size; ++k) total += static_cast<size_t>(heads[k * 2 * rows + 2 * r]);
    merged[r].reserve(total);
    for (int k = 0; k < g.size; ++k) {
      const int64_t* src = all.data() + static_cast<size_t>(k) * rows * L * 2 + r * L * 2;
      const int64_t count = heads[k * 2 * rows + 2 * r];
      for (int64_t j = 0; j < count; ++j) {
        merged[r].push_back(TopkCandidate{as_f32(src[2 * j]), src[2 * j + 1]});
      }
    }
  }
  return merged;
}

void throw_if_oom(const Group& g, const std::vector<int64_t>& flags, const char* op) {
  for (int64_t f : flags) {
    if (f & kFlagOom) {
      throw Error(Status::kOutOfMemory,
                  op_name(op) + ": out of memory for the candidate lists (on some rank)");
    }
  }
}

// ---- softmax_topk ------------------------------------------------------------

void softmax_topk_sharded(Communicator& comm, const TensorView& src, const TensorView& probs,
                          const TensorView& indices, const SoftmaxTopkOptions& topk,
                          const SoftmaxOptions& options) {
  const char* op = "softmax_topk";
  RowShape shape = row_shape(src, options.axis);
  std::vector<Agreed> agreed = shape.agreed;
  agreed.push_back({"k", topk.k});
  agreed.push_back({"renormalize", topk.renormalize ? 1 : 0});
  add_softmax_options(agreed, options);
  std::optional<Rowwise> rw;
  RowOut p, ix;
  const int64_t k = topk.k;
  const Group g = begin(comm, op, agreed, shape.n, [&] {
    rw.emplace(op, src, "src", true, options);
    reject_f64(*rw, op);
    if (k < 0) fail(op, "k must be >= 0, got " + std::to_string(k));
    p = k_output(*rw, probs, "probs", DType::kF32, k, src, options, op);
    ix = k_output(*rw, indices, "indices", DType::kI64, k, src, options, op);
    check_disjoint_or_same(probs, "probs", indices, "indices", op, false);
  });
  if (k > g.vocab) {
    fail(op_name(op).c_str(), "k must be in [0, V = " + std::to_string(g.vocab) + "], got " +
                                  std::to_string(k));
  }
  if (k == 0 || shape.rows <= 0) return;
  const int64_t rows = shape.rows;
  const int64_t n = shape.n;
  const int64_t kl = std::min(k, n);
  const int64_t cap = kl > 0 ? topk_cap(kl, n) : 0;
  const int64_t width = 5 + 2 * k;  // nan, max, ref, d, count, k x (value, index)
  std::vector<int64_t> local(static_cast<size_t>(rows * width), 0);
  for (int64_t r = 0; r < rows; ++r) {
    local[r * width + 1] = as_i64(-kInfD);
    local[r * width + 2] = as_i64(-kInfD);
    local[r * width + 3] = as_i64(0.0);
  }
  if (n > 0) {
    rw->run(floats_for<TopkCandidate>(cap), [&](const RowArgs& a) {
      float* scratch = a.scratch;
      TopkCandidate* buf = carve<TopkCandidate>(scratch, cap);
      const kernels::TopkScan s = topk_row(a.in[0], a.n, kl, buf, cap);
      int64_t* rec = local.data() + a.row * width;
      rec[0] = std::isnan(s.d) ? 1 : 0;
      rec[1] = as_i64(static_cast<double>(s.max));
      rec[2] = as_i64(s.ref);
      rec[3] = as_i64(s.d);
      rec[4] = kl;
      for (int64_t j = 0; j < kl; ++j) {
        rec[5 + 2 * j] = as_i64(buf[j].value);
        rec[6 + 2 * j] = g.offset + buf[j].index;
      }
    });
  }
  const std::vector<int64_t> all = allgather_rows(g, local);
  std::vector<TopkCandidate> cand;
  for (int64_t r = 0; r < rows; ++r) {
    bool nan_row = false;
    double gmax = -kInfD, ref = -kInfD, d = 0.0;
    cand.clear();
    for (int q = 0; q < g.size; ++q) {
      const int64_t* rec = all.data() + (static_cast<int64_t>(q) * rows + r) * width;
      nan_row = nan_row || rec[0] != 0;
      gmax = std::max(gmax, as_f64(rec[1]));
      if (as_f64(rec[3]) > 0.0) ref = std::max(ref, as_f64(rec[2]));
      for (int64_t j = 0; j < rec[4]; ++j) {
        cand.push_back(TopkCandidate{as_f32(rec[5 + 2 * j]), rec[6 + 2 * j]});
      }
    }
    for (int q = 0; q < g.size; ++q) {
      const int64_t* rec = all.data() + (static_cast<int64_t>(q) * rows + r) * width;
      const double dq = as_f64(rec[3]);
      if (dq > 0.0) d += dq * std::exp(as_f64(rec[2]) - ref);
    }
    std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), better_nan_first);
    const bool empty = !nan_row && gmax == -kInfD;
    double norm = 0.0, shift = 0.0;
    if (topk.renormalize && !nan_row && !empty) {
      shift = cand[0].value;
      for (int64_t j = 0; j < k; ++j) norm += std::exp(static_cast<double>(cand[j].value) - shift);
    }
    char* pr = p.at<char>(r);
    int64_t* id = ix.at<int64_t>(r);
    for (int64_t j = 0; j < k; ++j) {
      const double v = cand[j].value;
      float q;
      if (nan_row || (empty && options.empty_row == EmptyRow::kNan)) {
        q = kNaNF;
      } else if (v == -kInfD) {
        q = 0.0f;
      } else if (topk.renormalize) {
        q = static_cast<float>(std::exp(v - shift) / norm);
      } else {
        q = static_cast<float>(std::exp(v - ref) / d);
      }
      if (std::fabs(q) < std::numeric_limits<float>::min()) q = 0.0f;  // no denormals
      store_f32(pr + j * p.axis_stride * p.elem, p.dtype, q);
      id[j * ix.axis_stride] = cand[j].index;
    }
  }
}

// ---- sample --------------------------------------------------------------------

enum class Mode { kGreedy, kAll, kTopK, kMinP, kNucleus };

// z = fl(t / T) as the single-process sampler forms it.
void temper(const float* t, int64_t n, float T, float* z) {
  if (T == 1.0f) {
    std::memcpy(z, t, static_cast<size_t>(n) * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) z[i] = t[i] / T;
  }
}

// The best of (value, global index) records: larger value, then lower index.
struct Pick {
  double value = -kInfD;
  int64_t index = -1;
  void offer(double v, int64_t i) {
    if (i < 0) return;
    if (index < 0 || v > value || (v == value && i < index)) {
      value = v;
      index = i;
    }
  }
};

// The Gumbel-max over an explicit kept list (global indices).
int64_t gumbel_over(const TopkCandidate* buf, int64_t count, uint64_t seed, uint64_t row) {
  Pick best;
  for (int64_t j = 0; j < count; ++j) {
    const double v = static_cast<double>(buf[j].value) +
                     kernels::gumbel(seed, row, static_cast<uint64_t>(buf[j].index));
    best.offer(v, buf[j].index);
  }
  return best.index;
}

struct PlainSum {
  double s = 0.0;
  void add(double x) { s += x; }
  double value() const { return s; }
};

using U128 = unsigned __int128;

// q = floor(e^(z - z0) 2^64) for z <= z0 (z0 finite).
U128 fixed_mass(float z, double z0) {
  const double m = std::exp(static_cast<double>(z) - z0);
  return static_cast<U128>(m * 0x1p64);
}

class Sampler {
 public:
  Sampler(const Group& g, Rowwise& rw, const SampleOptions& so, int64_t rows, int64_t n)
      : g_(g), rw_(rw), so_(so), rows_(rows), n_(n), result_(static_cast<size_t>(rows), -1) {}

  std::vector<int64_t> run() {
    const Mode mode = choose_mode();
    if (mode == Mode::kGreedy || mode == Mode::kAll) {
      argmax_records(mode, std::vector<double>());
      return result_;
    }
    if (mode == Mode::kTopK) {
      const int64_t K = std::max(so_.top_k, so_.min_tokens_to_keep);
      std::vector<int64_t> flags;
      auto merged = candidates(std::vector<char>(static_cast<size_t>(rows_), 1), K,
                               so_.top_k_ties == TopKTies::kKeep, flags);
      for (int64_t r = 0; r < rows_; ++r) {
        auto& c = merged[r];
        if ((flags[r] & kFlagNaN) || c.empty()) continue;
        const auto mass = [](float v, double z0) { return std::exp(static_cast<double>(v) - z0); };
        const int64_t keep = filter_candidates<PlainSum>(c.data(), static_cast<int64_t>(c.size()),
                                                         so_, kernels::topk_better, mass);
        result_[r] = gumbel_over(c.data(), keep, so_.seed, static_cast<uint64_t>(r));
      }
      return result_;
    }
    // kMinP / kNucleus: the global max and visible count first.
    std::vector<double> z0(static_cast<size_t>(rows_), -kInfD);
    std::vector<int64_t> visible(static_cast<size_t>(rows_), 0);
    std::vector<char> live(static_cast<size_t>(rows_), 0);
    global_max(z0, visible, live);
    if (mode == Mode::kMinP) {
      min_p_only(z0, visible, live);
    } else {
      nucleus(z0, visible, live);
    }
    return result_;
  }

 private:
  Mode choose_mode() const {
    if (so_.temperature == 0.0f) return Mode::kGreedy;
    const bool top_k_on =
        so_.top_k > 0 && std::max(so_.top_k, so_.min_tokens_to_keep) < g_.vocab;
    if (top_k_on) return Mode::kTopK;
    if (so_.top_p < 1.0f) return Mode::kNucleus;
    if (so_.min_p > 0.0f) return Mode::kMinP;
    return Mode::kAll;
  }

  // Scratch floats per row: z, the candidate buffer and gumbel_argmax's.
  int64_t scratch_floats(int64_t cap) const {
    return n_ + floats_for<TopkCandidate>(cap) + floats_for<int64_t>(kChunk) + 2 * kChunk + 8;
  }

  // Greedy, unfiltered, or masked (z0 given: min-p threshold) argmax: one
  // record (flags, value, global index) per row and rank.
  void argmax_records(Mode mode, const std::vector<double>& z0) {
    std::vector<double> local(static_cast<size_t>(rows_) * 3, 0.0);
    for (int64_t r = 0; r < rows_; ++r) {
      local[3 * r + 1] = -kInfD;
      local[3 * r + 2] = -1.0;
    }
    const double lthr = std::log(static_cast<double>(so_.min_p));
    if (n_ > 0) {
      rw_.run(scratch_floats(0), [&](const RowArgs& a) {
        double* rec = local.data() + 3 * a.row;
        const float* t = a.in[0];
        if (mode == Mode::kGreedy) {
          const kernels::MaxScan ms = kernels::max_scan(t, a.n);
          rec[0] = ms.has_nan ? kFlagNaN : 0;
          if (!ms.has_nan && ms.max > -kInfF) {
            rec[1] = ms.max;
            rec[2] = static_cast<double>(g_.offset + kernels::find_first_equal(t, a.n, ms.max));
          }
          return;
        }
        float* scratch = a.scratch;
        float* z = scratch;
        scratch += n_;
        int64_t* idx = carve<int64_t>(scratch, kChunk);
        float* ebuf = scratch;
        auto* hbuf = reinterpret_cast<uint32_t*>(scratch + kChunk);
        temper(t, a.n, so_.temperature, z);
        const kernels::MaxScan ms = kernels::max_scan(z, a.n);
        if (ms.has_nan || ms.max == kInfF) {
          rec[0] = kFlagNaN;
          return;
        }
        if (!z0.empty()) {
          for (int64_t i = 0; i < a.n; ++i) {
            if (!(static_cast<double>(z[i]) - z0[a.row] >= lthr)) z[i] = -kInfF;
          }
        }
        const auto row = static_cast<uint64_t>(a.row);
        const int64_t li = gumbel_argmax(z, a.n, so_.seed, row, idx, ebuf, hbuf,
                                         static_cast<uint64_t>(g_.offset));
        if (li >= 0) {
          const uint64_t gi = static_cast<uint64_t>(g_.offset + li);
          rec[1] = static_cast<double>(z[li]) + kernels::gumbel(so_.seed, row, gi);
          rec[2] = static_cast<double>(gi);
        }
      });
    }
    const std::vector<double> all = allgather_rows(g_, local);
    for (int64_t r = 0; r < rows_; ++r) {
      if (!z0.empty() && result_[r] != -2) continue;  // masked argmax: only the rows asked
      bool nan_row = false;
      Pick best;
      for (int q = 0; q < g_.size; ++q) {
        const double* rec = all.data() + (static_cast<int64_t>(q) * rows_ + r) * 3;
        nan_row = nan_row || rec[0] != 0.0;
        if (rec[2] >= 0.0) best.offer(rec[1], static_cast<int64_t>(rec[2]));
      }
      // Greedy: the first rank with the max (value ties by lower index).
      result_[r] = nan_row ? -1 : best.index;
    }
  }

  // Every rank's K best visible z of the rows with want[r] (global indices,
  // sorted; with `ties`, also the entries tied with the K-th), merged.
  std::vector<std::vector<TopkCandidate>> candidates(const std::vector<char>& want, int64_t K,
                                                     bool ties, std::vector<int64_t>& flags) {
    std::vector<std::vector<TopkCandidate>> mine(static_cast<size_t>(rows_));
    flags.assign(static_cast<size_t>(rows_), 0);
    const int64_t kl = std::min(K, n_);
    const int64_t cap = kl > 0 ? topk_cap(kl, n_) : 0;
    if (kl > 0) {
      rw_.run(scratch_floats(cap), [&](const RowArgs& a) {
        if (!want[a.row]) return;
        float* scratch = a.scratch;
        float* z = scratch;
        scratch += n_;
        TopkCandidate* buf = carve<TopkCandidate>(scratch, cap);
        temper(a.in[0], a.n, so_.temperature, z);
        const kernels::TopkScan s = topk_row(z, a.n, kl, buf, cap);
        if (std::isnan(s.d)) {
          flags[a.row] = kFlagNaN;
          return;
        }
        try {
          auto& out = mine[a.row];
          int64_t count = 0;
          while (count < kl && buf[count].value > -kInfF) ++count;
          out.reserve(static_cast<size_t>(count));
          for (int64_t j = 0; j < count; ++j) {
            out.push_back(TopkCandidate{buf[j].value, g_.offset + buf[j].index});
          }
          if (ties && count == K) {
            const TopkCandidate last = buf[count - 1];
            for (int64_t i = last.index + 1; i < a.n; ++i) {
              if (z[i] == last.value) out.push_back(TopkCandidate{z[i], g_.offset + i});
            }
          }
        } catch (const std::bad_alloc&) {
          mine[a.row].clear();
          flags[a.row] = kFlagOom;
        }
      });
    }
    auto merged = exchange_lists(g_, mine, flags);
    throw_if_oom(g_, flags, "sample");
    return merged;
  }

  // Global max z0 and visible count per row; live[r] = the row has
  // something to sample (no NaN / +inf, some z > -inf). Dead rows give -1.
  void global_max(std::vector<double>& z0, std::vector<int64_t>& visible,
                  std::vector<char>& live) {
    std::vector<int64_t> local(static_cast<size_t>(rows_) * 3, 0);
    for (int64_t r = 0; r < rows_; ++r) local[3 * r + 1] = as_i64(-kInfD);
    if (n_ > 0) {
      rw_.run(scratch_floats(0), [&](const RowArgs& a) {
        int64_t* rec = local.data() + 3 * a.row;
        float* z = a.scratch;
        temper(a.in[0], a.n, so_.temperature, z);
        const kernels::MaxScan ms = kernels::max_scan(z, a.n);
        if (ms.has_nan || ms.max == kInfF) {
          rec[0] = kFlagNaN;
          return;
        }
        rec[1] = as_i64(static_cast<double>(ms.max));
        int64_t count = 0;
        for (int64_t i = 0; i < a.n; ++i) count += z[i] > -kInfF ? 1 : 0;
        rec[2] = count;
      });
    }
    const std::vector<int64_t> all = allgather_rows(g_, local);
    for (int64_t r = 0; r < rows_; ++r) {
      bool nan_row = false;
      for (int q = 0; q < g_.size; ++q) {
        const int64_t* rec = all.data() + (static_cast<int64_t>(q) * rows_ + r) * 3;
        nan_row = nan_row || rec[0] != 0;
        z0[r] = std::max(z0[r], as_f64(rec[1]));
        visible[r] += rec[2];
      }
      live[r] = !nan_row && z0[r] > -kInfD;
    }
  }

  // min-p alone: the entries with fl64(z - z0) >= fl64(log min_p) when they
  // reach the floor, else the floor's best.
  void min_p_only(const std::vector<double>& z0, const std::vector<int64_t>& visible,
                  const std::vector<char>& live) {
    const double lthr = std::log(static_cast<double>(so_.min_p));
    std::vector<int64_t> local(static_cast<size_t>(rows_), 0);
    if (n_ > 0) {
      rw_.run(scratch_floats(0), [&](const RowArgs& a) {
        if (!live[a.row]) return;
        float* z = a.scratch;
        temper(a.in[0], a.n, so_.temperature, z);
        int64_t pass = 0;
        for (int64_t i = 0; i < a.n; ++i) {
          pass += static_cast<double>(z[i]) - z0[a.row] >= lthr ? 1 : 0;
        }
        local[a.row] = pass;
      });
    }
    const std::vector<int64_t> all = allgather_rows(g_, local);
    std::vector<char> floor_rows(static_cast<size_t>(rows_), 0);
    bool any_threshold = false;
    for (int64_t r = 0; r < rows_; ++r) {
      if (!live[r]) continue;
      int64_t pass = 0;
      for (int q = 0; q < g_.size; ++q) pass += all[static_cast<size_t>(q * rows_ + r)];
      const int64_t floor_n = std::min(so_.min_tokens_to_keep, visible[r]);
      if (pass >= floor_n) {
        result_[r] = -2;  // marks the rows of the masked argmax
        any_threshold = true;
      } else {
        floor_rows[r] = 1;
      }
    }
    // Collective on every rank alike: the decisions above are replicated.
    if (any_threshold) argmax_records(Mode::kMinP, z0);
    const bool any_floor = std::find(floor_rows.begin(), floor_rows.end(), 1) != floor_rows.end();
    if (any_floor) {
      std::vector<int64_t> flags;
      auto merged = candidates(floor_rows, so_.min_tokens_to_keep, false, flags);
      for (int64_t r = 0; r < rows_; ++r) {
        if (!floor_rows[r]) continue;
        auto& c = merged[r];
        const int64_t keep = std::min<int64_t>(so_.min_tokens_to_keep, c.size());
        std::partial_sort(c.begin(), c.begin() + keep, c.end(), kernels::topk_better);
        result_[r] = gumbel_over(c.data(), keep, so_.seed, static_cast<uint64_t>(r));
      }
    }
  }

  // The nucleus over the whole vocabulary (top-k off), then min-p and the
  // floors on the kept prefix (see the header comment for the exact sums).
  void nucleus(const std::vector<double>& z0, const std::vector<int64_t>& visible,
               const std::vector<char>& live) {
    // The exact fixed-point total per row.
    std::vector<int64_t> local(static_cast<size_t>(rows_) * 2, 0);
    if (n_ > 0) {
      rw_.run(scratch_floats(0), [&](const RowArgs& a) {
        if (!live[a.row]) return;
        float* z = a.scratch;
        temper(a.in[0], a.n, so_.temperature, z);
        U128 sum = 0;
        for (int64_t i = 0; i < a.n; ++i) {
          if (z[i] > -kInfF) sum += fixed_mass(z[i], z0[a.row]);
        }
        local[2 * a.row] = static_cast<int64_t>(static_cast<uint64_t>(sum));
        local[2 * a.row + 1] = static_cast<int64_t>(static_cast<uint64_t>(sum >> 64));
      });
    }
    const std::vector<int64_t> all = allgather_rows(g_, local);
    std::vector<double> target(static_cast<size_t>(rows_), 0.0);
    for (int64_t r = 0; r < rows_; ++r) {
      U128 total = 0;
      for (int q = 0; q < g_.size; ++q) {
        const size_t at = 2 * static_cast<size_t>(q * rows_ + r);
        total += (static_cast<U128>(static_cast<uint64_t>(all[at + 1])) << 64) |
                 static_cast<uint64_t>(all[at]);
      }
      target[r] = static_cast<double>(so_.top_p) * static_cast<double>(total);
    }
    std::vector<char> pending = live;
    int64_t K = std::max(kNucleusFirstK, so_.min_tokens_to_keep);
    for (;;) {
      const bool any = std::find(pending.begin(), pending.end(), 1) != pending.end();
      if (!any) break;
      std::vector<int64_t> flags;
      auto merged = candidates(pending, K, false, flags);
      for (int64_t r = 0; r < rows_; ++r) {
        if (!pending[r]) continue;
        auto& c = merged[r];
        const int64_t m = std::min<int64_t>(K, c.size());  // the global top-m, sorted
        std::partial_sort(c.begin(), c.begin() + m, c.end(), kernels::topk_better);
        U128 cum = 0;
        int64_t keep = -1;
        for (int64_t j = 0; j < m; ++j) {
          cum += fixed_mass(c[j].value, z0[r]);
          if (static_cast<double>(cum) >= target[r]) {
            keep = j + 1;
            break;
          }
        }
        if (keep < 0 && m < visible[r]) continue;  // widen
        if (keep < 0) keep = m;  // every visible entry (rounding short of the target)
        keep = std::max(keep, std::min(so_.min_tokens_to_keep, m));
        if (so_.min_p > 0.0f) {
          const double top = c[0].value;
          const double lthr = std::log(static_cast<double>(so_.min_p));
          const int64_t pass =
              std::partition_point(c.begin(), c.begin() + keep,
                                   [&](const TopkCandidate& e) {
                                     return static_cast<double>(e.value) - top >= lthr;
                                   }) -
              c.begin();
          keep = std::max(pass, std::min(so_.min_tokens_to_keep, keep));
        }
        result_[r] = gumbel_over(c.data(), keep, so_.seed, static_cast<uint64_t>(r));
        pending[r] = 0;
      }
      if (K >= g_.vocab) break;
      K = K > g_.vocab / kNucleusGrowth ? g_.vocab : K * kNucleusGrowth;
    }
  }

  const Group& g_;
  Rowwise& rw_;
  const SampleOptions& so_;
  int64_t rows_;
  int64_t n_;
  std::vector<int64_t> result_;
};

void sample_sharded(Communicator& comm, const TensorView& src, const TensorView& indices,
                    const SampleOptions& so, const SoftmaxOptions& options) {
  const char* op = "sample";
  RowShape shape = row_shape(src, options.axis);
  std::vector<Agreed> agreed = shape.agreed;
  agreed.push_back({"sample temperature", bits(so.temperature)});
  agreed.push_back({"top_k", so.top_k});
  agreed.push_back({"top_p", bits(so.top_p)});
  agreed.push_back({"min_p", bits(so.min_p)});
  agreed.push_back({"min_tokens_to_keep", so.min_tokens_to_keep});
  agreed.push_back({"top_k_ties", static_cast<int64_t>(so.top_k_ties)});
  agreed.push_back({"seed", static_cast<int64_t>(so.seed)});
  add_softmax_options(agreed, options);
  std::optional<Rowwise> rw;
  RowOut out;
  const Group g = begin(comm, op, agreed, shape.n, [&] {
    rw.emplace(op, src, "src", true, options);
    reject_f64(*rw, op);
    check_sample_options(so, op);
    out = index_output(*rw, indices, "indices", src, options, op);
  });
  if (shape.rows <= 0) return;
  Sampler sampler(g, *rw, so, shape.rows, shape.n);
  const std::vector<int64_t> result = sampler.run();
  for (int64_t r = 0; r < shape.rows; ++r) *out.at<int64_t>(r) = result[r];
}

}  // namespace
}  // namespace smax::detail::dist

namespace smax::distributed {

void softmax_topk(Communicator& comm, const TensorView& src, const TensorView& probs,
                  const TensorView& indices, const SoftmaxTopkOptions& topk,
                  const SoftmaxOptions& options) {
  detail::dist::softmax_topk_sharded(comm, src, probs, indices, topk, options);
}

void sample(Communicator& comm, const TensorView& src, const TensorView& indices,
            const SampleOptions& sample, const SoftmaxOptions& options) {
  detail::dist::sample_sharded(comm, src, indices, sample, options);
}

}  // namespace smax::distributed
