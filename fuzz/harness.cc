// fuzz/harness.cc: see harness.h (a case described, the library called and
// the result checked, and the entry points; the decoding:
// harness_decode.cc, what the parts share: harness_internal.h).
#include "harness.h"
#include "harness_internal.h"
#include "typed_call.h"
#include "op_table.h"

namespace smax_fuzz {
namespace family_internal {

Stats g_stats;

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
     << " alias=" << c.alias << " raw_y=" << c.raw_y << " dtypes=" << smax::dtype_name(c.in_dtype)
     << "->" << smax::dtype_name(c.out_dtype);
  for (const Operand* o : {&c.in0, &c.in1, &c.out, &c.add_mask, &c.bool_mask}) {
    if (!o->present) continue;
    os << "\n  " << o->name << ":";
    describe_view(os, *o);
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
  if (c.typed && !o.is_bool) {
    const bool output = &o == &c.out;
    const DType d = output ? c.out_dtype : c.in_dtype;
    const std::vector<unsigned char>& arena = output ? c.typed_out : c.typed_in;
    return tensor_view(o, d, const_cast<unsigned char*>(arena.data()) + o.origin * smax::dtype_size(d));
  }
  DType dtype = o.is_bool ? DType::kBool : DType::kF32;
  if (o.wrong_dtype) dtype = o.is_bool ? DType::kF32 : DType::kBool;
  void* data = nullptr;
  if (o.null_data) {
    data = nullptr;
  } else if (o.is_bool) {
    data = const_cast<uint8_t*>(c.bytes.data()) + o.origin;
  } else {
    data = const_cast<float*>(c.arena.data()) + o.origin;
  }
  return tensor_view(o, dtype, data);
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
    smax_tensor ta = smax_cli::c_tensor(a), tb = smax_cli::c_tensor(b), tout = smax_cli::c_tensor(out), tm, tbm;
    if (opt.additive_mask) {
      tm = smax_cli::c_tensor(*opt.additive_mask);
      o.additive_mask = &tm;
    }
    if (opt.bool_mask) {
      tbm = smax_cli::c_tensor(*opt.bool_mask);
      o.bool_mask = &tbm;
    }
    smax_status st = SMAX_STATUS_INTERNAL;
    switch (c.op) {
      case Op::kSoftmax: st = smax_softmax(&ta, &tout, &o); break;
      case Op::kLogSoftmax: st = smax_log_softmax(&ta, &tout, &o); break;
      case Op::kLogsumexp: st = smax_logsumexp(&ta, &tout, &o); break;
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
  const auto run = [&] {
    switch (c.op) {
      case Op::kSoftmax: smax::softmax(a, out, opt); break;
      case Op::kLogSoftmax: smax::log_softmax(a, out, opt); break;
      case Op::kLogsumexp: smax::logsumexp(a, out, opt); break;
      case Op::kSoftmaxBackward: smax::softmax_backward(a, b, out, opt); break;
      case Op::kLogSoftmaxBackward: smax::log_softmax_backward(a, b, out, opt); break;
    }
  };
  return checked_call(
      run, [&](const std::string& msg) { return msg.rfind(op_name(c.op), 0) == 0; },
      [&](const std::string& what) { violation(c, what); }, ok);
}

// Special values exactly, finite values within `bound`. Returns false on a
// finite-value bound failure only (so callers can try a documented
// fallback); special-value mismatches are recorded directly.
bool element_ok(Check& ck, size_t i, float out_f, double ref, double bound, bool exact_zero,
                DType out_dtype) {
  const double out = out_f;
  // A narrow output: the value rounded to its dtype, and half an ulp more.
  const bool narrow = out_dtype == DType::kF16 || out_dtype == DType::kBF16;
  const DType exact_type = narrow ? out_dtype : DType::kF32;
  if (narrow) bound += std::max(smax_cli::half_ulp(out_dtype, ref), smax_cli::half_ulp(out_dtype, out));
  if (std::isnan(ref) || std::isnan(out)) {
    if (std::isnan(ref) != std::isnan(out)) ck.fail(i, out, ref, bound, "(NaN mismatch)");
    return true;
  }
  if (std::isinf(ref)) {
    if (out != ref) ck.fail(i, out, ref, bound, "(inf mismatch)");
    return true;
  }
  if (std::isinf(out)) {
    if (storage_round(exact_type, ref) != out) ck.fail(i, out, ref, bound, "(unexpected inf)");
    return true;
  }
  if (exact_zero && ref == 0.0) {
    if (out != 0.0) ck.fail(i, out, ref, 0.0, "(exact 0 required)");
    return true;
  }
  return std::fabs(out - ref) <= bound || (narrow && storage_round(exact_type, ref) == out);
}

// Storage dtypes (as the ops harness, harness_ops_dtypes.cc): drawn from the
// last byte an input reads, where storage cannot change the call's meaning:
// no corruption, aliasing or overlapping operands; f64 inputs of a forward
// op only at scale = temperature = 1 without an additive mask (the float64
// path forms t = x * s + mask in double, the oracle in f32). The inputs are
// rounded to in_dtype in the arena the oracle reads.
void decode_storage(Case& c, Reader& r) {
  const uint8_t b = r.u8();
  if (c.must_reject || c.alias) return;
  const Operand* ops[] = {&c.in0, &c.in1, &c.out, &c.add_mask, &c.bool_mask};
  for (const Operand* o : ops) {
    if (!o->present) continue;
    if (o->wrong_dtype || o->null_data || o->unallocatable || o->rank_override != -1000) return;
    for (const Operand* other : ops) {
      if (other != o && other->present && !o->is_bool && !other->is_bool && ranges_overlap(*o, *other)) {
        return;
      }
    }
  }
  StorageDraw draw = draw_storage(b);
  const bool forward = c.op == Op::kSoftmax || c.op == Op::kLogSoftmax || c.op == Op::kLogsumexp;
  if (draw.in == DType::kF64 && forward &&
      (c.opt.scale != 1.0f || c.opt.temperature != 1.0f || c.add_mask.present)) {
    draw.in = DType::kF32;
  }
  if (!draw.typed()) return;
  c.in_dtype = draw.in;
  c.out_dtype = draw.out;
  make_typed_arenas(c.arena, draw, &c.typed_in, &c.typed_out);
}

void check_result(Case& c, const std::vector<double>& ref, const std::vector<double>& y,
                  const std::vector<double>& dy) {
  const std::vector<double> out =
      c.typed ? dense_in_arena(c.out, c.typed_out, c.out_dtype, c.arena.size())
              : smax::reference::to_dense(view_of(c, c.out));
  if (out.size() != ref.size()) violation(c, "reference and output sizes differ");
  Check ck;
  ck.c = &c;
  const double s = static_cast<double>(c.opt.scale / c.opt.temperature);
  if (c.op == Op::kSoftmax) {
    for (size_t i = 0; i < ref.size(); ++i) {
      const double bound = smax::reference::softmax_bound(ref[i]);
      if (!element_ok(ck, i, static_cast<float>(out[i]), ref[i], bound, true, c.out_dtype)) {
        ck.fail(i, out[i], ref[i], bound, "(softmax bound)");
      }
    }
  } else if (c.op == Op::kLogSoftmax || c.op == Op::kLogsumexp) {
    for (size_t i = 0; i < ref.size(); ++i) {
      const double bound = smax::reference::log_softmax_bound(ref[i]);
      if (!element_ok(ck, i, static_cast<float>(out[i]), ref[i], bound, false, c.out_dtype)) {
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
          bool exact_zero;
          const double bound = smax_cli::backward_element_bound(log, s, y[i], dy[i], row, &exact_zero);
          if (exact_zero && !std::isnan(ref[i]) && !std::isnan(out[i])) {
            if (out[i] != 0.0) ck.fail(i, out[i], ref[i], 0.0, "(exact 0 required)");
            continue;
          }
          if (element_ok(ck, i, static_cast<float>(out[i]), ref[i], bound, false, c.out_dtype)) continue;
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

}  // namespace family_internal

using namespace family_internal;

bool parse_op(const std::string& name, Op* op) {
  return parse_name(name, smax_cli::softmax_family(), op_name, op);
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
  decode_storage(c, r);  // rounds the inputs to their storage dtype first
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
        case Op::kLogsumexp: ref = smax::reference::logsumexp(a, opt); break;
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

  c.typed = c.in_dtype != DType::kF32 || c.out_dtype != DType::kF32;
  if (c.typed) {  // the library's views of the operands, now in the typed arenas
    if (c.add_mask.present) opt.additive_mask = view_of(c, c.add_mask);
  }
  const std::vector<float> arena_before = c.arena;
  const std::vector<uint8_t> bytes_before = c.bytes;
  const std::vector<unsigned char> typed_in_before = c.typed_in, typed_out_before = c.typed_out;
  bool ok = false;
  const std::string msg = call(c, opt, &ok);
  if (c.typed_in != typed_in_before) violation(c, "the call wrote to a typed input");

  if (!ok) {
    ++g_stats.rejected;
    if (std::memcmp(arena_before.data(), c.arena.data(), c.arena.size() * sizeof(float)) != 0 ||
        bytes_before != c.bytes || typed_out_before != c.typed_out) {
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
  if (c.typed) ++g_stats.typed;
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
    const size_t out_size = c.typed ? static_cast<size_t>(smax::dtype_size(c.out_dtype)) : 0;
    for (size_t i = 0; c.typed && i < c.arena.size(); ++i) {
      if (!writable[i] &&
          std::memcmp(&typed_out_before[i * out_size], &c.typed_out[i * out_size], out_size) != 0) {
        violation(c, "typed memory outside dst changed at arena index " + std::to_string(i));
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
    const std::vector<unsigned char> first_typed = c.typed_out;
    SoftmaxOptions one = opt;
    one.threads = 1;
    bool ok1 = false;
    const std::string m1 = call(c, one, &ok1);
    if (!ok1) violation(c, "the threads=1 rerun failed: " + m1);
    if (std::memcmp(first.data(), c.arena.data(), first.size() * sizeof(float)) != 0 ||
        first_typed != c.typed_out) {
      violation(c, "results differ between threads=" + std::to_string(opt.threads) +
                       " and threads=1");
    }
  }
}

}  // namespace smax_fuzz
