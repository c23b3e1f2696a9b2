// fuzz/harness_ops.cc: see harness_ops.h (a result checked against the
// expectations, and the entry points; the other parts: harness_ops_internal.h).
#include "harness_ops.h"
#include "harness_ops_internal.h"
#include "typed_call.h"

namespace smax_fuzz {
namespace ops_internal {

GroupStats g_stats;

void check_values(Check& ck, const std::vector<double>& out, const std::vector<double>& refv,
                  const std::vector<double>& bound, const std::vector<char>* exact_zero,
                  const std::vector<double>* gap, const char* what,
                  const std::vector<char>* overflow_ok, DType out_dtype) {
  // A narrow output adds the rounding to its type (docs/dtypes.md); an f32
  // or f64 output's bound is the op's own.
  const bool narrow = out_dtype == DType::kF16 || out_dtype == DType::kBF16;
  const DType exact_type = out_dtype == DType::kF64 ? DType::kF32 : out_dtype;
  for (size_t i = 0; i < refv.size() && i < out.size(); ++i) {
    const double o = out[i], r = refv[i];
    const double b = bound[i] + (narrow ? std::max(smax_cli::half_ulp(out_dtype, r),
                                                   smax_cli::half_ulp(out_dtype, o))
                                        : 0.0);
    const bool ovf = overflow_ok && i < overflow_ok->size() && (*overflow_ok)[i];
    if (ovf && !std::isfinite(o)) continue;  // f32 intermediate overflow (see vjp_row_overflows)
    if (std::isnan(r) || std::isnan(o)) {
      if (std::isnan(r) != std::isnan(o)) ck.fail(i, o, r, b, "(NaN mismatch)");
      continue;
    }
    if (std::isinf(r)) {
      if (o != r) ck.fail(i, o, r, b, "(inf mismatch)");
      continue;
    }
    if (std::isinf(o)) {
      // inf is within the documented bound when ref +- bound reaches beyond
      // f32 on that side (e.g. self_adjust_softmax_backward at temperature
      // 1e-30: bound 4e53 around an exact 0).
      const bool bound_reaches = o > 0 ? std::isinf(storage_round(exact_type, r + b))
                                       : std::isinf(storage_round(exact_type, r - b));
      if (storage_round(exact_type, r) != o && !bound_reaches) {
        ck.fail(i, o, r, b, "(unexpected inf)");
      }
      continue;
    }
    if (exact_zero && (*exact_zero)[i] && r == 0.0) {
      if (o != 0.0) ck.fail(i, o, r, 0.0, "(exact 0 required)");
      continue;
    }
    // Values whose rounding to the output type is exact pass (bounds of 0:
    // exact outputs).
    if (storage_round(exact_type, r) == o) continue;
    if (std::fabs(o - r) <= b) continue;
    if (gap && std::fabs(o - r) <= b + (*gap)[i]) {
      ++g_stats.known_dot_gap;
      continue;
    }
    ck.fail(i, o, r, b, what);
  }
  if (out.size() != refv.size()) ck.fail(0, out.size(), refv.size(), 0, "(sizes differ)");
}

void check_result(Case& c, Expect& ex, const Extra& extra) {
  Check ck;
  const OpDef& op = *c.op;
  if (nonfinite_dloss(c)) {
    ++g_stats.known_open;
    return;
  }
  if (op.custom == Custom::kCollapse) {
    if (c.out.present) {
      const std::vector<double> f = dense_f32(c, c.out);
      double sum = 0.0;
      for (size_t i = 0; i < f.size(); ++i) {
        if (f[i] != 0.0 && f[i] != 1.0) ck.fail(i, f[i], 0, 0, "(flag not 0 / 1)");
        sum += f[i];
        if (!ex.flags.empty() && f[i] != ex.flags[i]) ck.fail(i, f[i], ex.flags[i], 0, "(collapse flag differs from the reference)");
      }
      const double frac = f.empty() ? 0.0 : sum / static_cast<double>(f.size());
      if (std::fabs(frac - extra.collapse) > 1e-12) ck.fail(0, extra.collapse, frac, 0, "(fraction != mean of the flags)");
    }
    if (!(extra.collapse >= 0.0 && extra.collapse <= 1.0)) ck.fail(0, extra.collapse, 0, 0, "(fraction outside [0, 1])");
  } else if (op.custom == Custom::kSoftNms) {
    const smax::SoftNmsResult& want = ex.nms;
    std::vector<int64_t> idx;
    std::vector<double> sc;
    if (c.nms_vector_api) {
      idx = extra.nms.indices;
      sc.assign(extra.nms.scores.begin(), extra.nms.scores.end());
    } else {
      const std::vector<int64_t> all = dense_i64(c, c.out_index);
      const std::vector<double> alls = dense_f32(c, c.out);
      if (extra.nms_count < 0 || extra.nms_count > static_cast<int64_t>(all.size())) ck.fail(0, extra.nms_count, 0, 0, "(count)");
      for (size_t i = 0; i < all.size(); ++i) {
        if (static_cast<int64_t>(i) < extra.nms_count) {
          idx.push_back(all[i]);
          sc.push_back(alls[i]);
        } else if (all[i] != -1 || alls[i] != 0.0) {
          ck.fail(i, alls[i], 0, 0, "(unused entries must be -1 / 0)");
        }
      }
    }
    if (idx != want.indices) {
      ck.fail(0, idx.size(), want.indices.size(), 0, "(kept indices differ from the reference)");
    } else {
      for (size_t i = 0; i < sc.size(); ++i) {
        const double r = want.scores[i];
        if (sc[i] != r && std::fabs(sc[i] - r) > 1e-6 * std::fabs(r)) ck.fail(i, sc[i], r, 1e-6 * std::fabs(r), "(score)");
      }
    }
  } else if (op.custom == Custom::kLce || op.custom == Custom::kLceBackward || op.custom == Custom::kLceFused) {
    if (c.out.present) check_values(ck, dense_f32(c, c.out), ex.ref, ex.bound, nullptr, nullptr, "(loss bound)");
    if (c.dloss.present) {
      check_values(ck, dense_f32(c, c.dhidden), ex.ref2, ex.bound2, nullptr, nullptr, "(dhidden bound)");
      check_values(ck, dense_f32(c, c.dweight), ex.ref3, ex.bound3, nullptr, nullptr, "(dweight bound)");
      if (c.dbias.present) check_values(ck, dense_f32(c, c.dbias), ex.ref4, ex.bound4, nullptr, nullptr, "(dbias bound)");
    }
  } else if (op.custom == Custom::kSamplingFilter) {
    // Exact, except that a fragile row (top-p cut within the oracle's
    // tolerance) may keep one entry more or less.
    const std::vector<double> out = dense_f32(c, c.out);
    SoftmaxOptions axis_only;
    axis_only.axis = c.opt.axis;
    const ref::RefRows R = ref::ref_rows("fuzz", view_of(c, c.out), axis_only, false);
    for (int64_t r = 0; r < R.rows; ++r) {
      int diffs = 0;
      for (int64_t k = 0; k < R.n; ++k) {
        const size_t i = static_cast<size_t>(dense_index(R, r, k));
        const double o = out[i], w = ex.ref[i];
        const bool same = (std::isnan(o) && std::isnan(w)) || o == static_cast<double>(static_cast<float>(w));
        if (same) continue;
        if (ex.index_free[static_cast<size_t>(r)] && (o == -kInfD || w == -kInfD) && diffs++ == 0) continue;
        ck.fail(i, o, w, 0, "(sampling_filter value)");
      }
    }
  } else {
    if (c.out.present && !ex.ref.empty()) {
      if (!ex.unchecked.empty()) {  // not compared: the output stands in for the reference
        const std::vector<double> out = dense_f32(c, c.out);
        for (size_t i = 0; i < ex.unchecked.size() && i < out.size() && i < ex.ref.size(); ++i) {
          if (!ex.unchecked[i]) continue;
          ex.ref[i] = out[i];
          if (i < ex.exact_zero.size()) ex.exact_zero[i] = 0;
        }
      }
      const bool gap = std::any_of(ex.dot_gap.begin(), ex.dot_gap.end(), [](double v) { return v > 0; });
      check_values(ck, dense_f32(c, c.out), ex.ref, ex.bound, &ex.exact_zero, gap ? &ex.dot_gap : nullptr,
                   "(documented bound)", ex.overflow_ok.empty() ? nullptr : &ex.overflow_ok,
                   c.out_dtype);
    }
    for (Expect::Out& x : ex.extras) {
      const std::string what = std::string("(") + x.o->name + " bound)";
      const std::vector<double> got = dense_f32(c, *x.o);
      if (x.o == &c.dprow) {  // per row: rows with a non-finite dy are not compared
        for (size_t r = 0; r < ex.unchecked_row.size() && r < x.ref.size() && r < got.size(); ++r) {
          if (ex.unchecked_row[r]) x.ref[r] = got[r];
        }
      }
      check_values(ck, got, x.ref, x.bound, nullptr, nullptr, what.c_str(), nullptr, c.out_dtype);
    }
    if (c.out_index.present) {
      const std::vector<int64_t> got = dense_i64(c, c.out_index);
      if (got.size() != ex.ref_index.size()) ck.fail(0, got.size(), ex.ref_index.size(), 0, "(index count)");
      for (size_t i = 0; i < got.size() && i < ex.ref_index.size(); ++i) {
        if (got[i] == ex.ref_index[i]) continue;
        if (!ex.index_free.empty() && ex.index_free[i] && got[i] >= -1 && got[i] < c.n) continue;
        ck.fail(i, got[i], ex.ref_index[i], 0, "(index differs)");
      }
    }
  }
  if (ck.failures) violation(c, std::to_string(ck.failures) + " output element(s) wrong; first: " + ck.first);
}

}  // namespace ops_internal

using namespace ops_internal;

const char* group_name(Group g) {
  switch (g) {
    case Group::kNormalizers: return "normalizers";
    case Group::kLosses: return "losses";
    case Group::kSampling: return "sampling";
    case Group::kOptions: return "options";
  }
  return "?";
}

bool parse_group(const std::string& name, Group* g) {
  return parse_name(name, {Group::kNormalizers, Group::kLosses, Group::kSampling, Group::kOptions},
                    group_name, g);
}

const GroupStats& group_stats() { return g_stats; }

void run_group_one(Group group, const uint8_t* data, size_t size) {
  ++g_stats.runs;
  Reader r(data, size);
  const std::vector<OpDef>& ops = group_ops(group);
  Case c;
  c.op = &ops[r.u8() % ops.size()];
  // Lift the previous input's cap first: supported_targets() is after the
  // cap, so the choice below would depend on the input run before.
  smax::set_max_target("");
  const std::vector<std::string> targets = smax::supported_targets();
  c.target_cap = targets[r.u8() % targets.size()];
  if (c.op->custom == Custom::kSoftNms) decode_soft_nms(c, r);
  else if (c.op->custom == Custom::kLce || c.op->custom == Custom::kLceBackward || c.op->custom == Custom::kLceFused) decode_lce(c, r);
  else decode_rowwise(c, r);
  finish_decode(c, r);
  for (Operand* o : c.operands()) {
    if (o->present && o->unallocatable && !c.must_reject) {
      ++g_stats.skipped;
      return;
    }
  }
  fill_inputs(c, r);
  decode_storage(c, r);  // rounds the inputs to their storage dtype first
  smax::set_max_target(c.target_cap);
  Expect ex;
  bool ref_ok = false;
  std::string ref_error;
  if (!c.must_reject) {
    try {
      ex = expect_of(c);
      unchecked_rows(c, ex);
      ref_ok = true;
    } catch (const smax::Error& e) {
      ref_error = e.what();
    }
  }
  c.typed = storage_drawn(c);  // from here on the library sees the typed arenas
  if (std::getenv("SMAX_FUZZ_TRACE")) {  // the case before the call (for reports that abort inside it)
    std::fprintf(stderr, "smax fuzz case: %s\n", describe(c).c_str());
  }
  const std::vector<float> f32_before = c.f32;
  const std::vector<int64_t> i64_before = c.i64;
  const std::vector<uint8_t> bytes_before = c.bytes;
  const std::vector<unsigned char> typed_in_before = c.typed_in, typed_out_before = c.typed_out;
  bool ok = false;
  Extra extra;
  const std::string msg = call(c, c.opt, &ok, &extra);
  if (c.typed_in != typed_in_before) violation(c, "the call wrote to a typed input");
  if (!ok) {
    ++g_stats.rejected;
    if (std::memcmp(f32_before.data(), c.f32.data(), c.f32.size() * sizeof(float)) != 0 ||
        i64_before != c.i64 || bytes_before != c.bytes || c.typed_out != typed_out_before) {
      violation(c, "a rejected call wrote to memory: " + msg);
    }
    if (!c.must_reject) {
      if (!ref_ok) {  // the oracle rejects it too: a gap of this model, not of smax
        ++g_stats.grey;
        return;
      }
      bool grey = false;
      for (Operand* o : c.operands()) {
        if (!o->present || o->input) continue;
        if (folds(*o)) grey = true;
        // Address ranges that overlap without a shared element (an input,
        // or another output such as ssmax_backward's ds inside dsrc's span):
        // the library's overlap check is conservative there.
        for (Operand* other : c.operands()) {
          if (other != o && other->present && overlaps(*o, *other)) grey = true;
        }
      }
      if (!grey) violation(c, "a valid call was rejected: " + msg);
      ++g_stats.grey;
    }
    return;
  }
  ++g_stats.accepted;
  if (c.typed) ++g_stats.typed;
  if (c.must_reject) violation(c, "an invalid call was accepted");
  if (!ref_ok) violation(c, "accepted, but the float64 oracle rejects the call: " + ref_error);
  // Nothing outside the outputs changed.
  {
    std::vector<char> w32(c.f32.size(), 0), w64(c.i64.size(), 0);
    for (Operand* o : c.operands()) {
      if (!o->present || o->input) continue;
      for (int64_t off : offsets_of(*o)) {
        (o->arena == Arena::kF32 ? w32 : w64)[static_cast<size_t>(o->origin + off)] = 1;
      }
    }
    for (size_t i = 0; i < c.f32.size(); ++i) {
      if (!w32[i] && std::memcmp(&f32_before[i], &c.f32[i], sizeof(float)) != 0) {
        violation(c, "f32 memory outside the outputs changed at arena index " + std::to_string(i));
      }
    }
    const size_t out_size = c.typed ? static_cast<size_t>(smax::dtype_size(c.out_dtype)) : 0;
    for (size_t i = 0; c.typed && i < c.f32.size(); ++i) {
      if (!w32[i] && std::memcmp(&typed_out_before[i * out_size], &c.typed_out[i * out_size], out_size) != 0) {
        violation(c, "typed memory outside the outputs changed at arena index " + std::to_string(i));
      }
    }
    for (size_t i = 0; i < c.i64.size(); ++i) {
      if (!w64[i] && i64_before[i] != c.i64[i]) {
        violation(c, "i64 memory outside the outputs changed at arena index " + std::to_string(i));
      }
    }
    if (bytes_before != c.bytes) violation(c, "the bool mask changed");
  }
  check_result(c, ex, extra);

  // Determinism: the same bits with one thread (when the inputs survived).
  bool overlap = c.alias;
  for (Operand* o : c.operands()) {
    if (!o->present || o->input) continue;
    for (Operand* in : c.operands()) {
      if (in->present && in->input && overlaps(*o, *in)) overlap = true;
    }
  }
  if (!overlap && c.opt.threads != 1) {
    const std::vector<float> f1 = c.f32;
    const std::vector<unsigned char> t1 = c.typed_out;
    const std::vector<int64_t> i1 = c.i64;
    const double collapse1 = extra.collapse;
    const smax::SoftNmsResult nms1 = extra.nms;
    SoftmaxOptions one = c.opt;
    one.threads = 1;
    bool ok1 = false;
    Extra extra1;
    const std::string m1 = call(c, one, &ok1, &extra1);
    if (!ok1) violation(c, "the threads=1 rerun failed: " + m1);
    if (std::memcmp(f1.data(), c.f32.data(), f1.size() * sizeof(float)) != 0 || i1 != c.i64 ||
        t1 != c.typed_out ||
        std::memcmp(&collapse1, &extra1.collapse, sizeof(double)) != 0 ||
        nms1.indices != extra1.nms.indices || nms1.scores != extra1.nms.scores) {
      violation(c, "results differ between threads=" + std::to_string(c.opt.threads) + " and threads=1");
    }
  }
}

}  // namespace smax_fuzz
