// fuzz/harness_internal.h: what the two parts of the softmax-family harness
// (harness.h) share: constants, the operands, the decoded case and the
// functions each part defines.
//
//   harness_decode.cc  input values, strides, an input decoded into a Case and
//                      its inputs filled (the decoding order is the corpora's
//                      format: do not reorder)
//   harness.cc         a case described, the library called, the result
//                      checked; the entry points of harness.h
//
// Internal to fuzz/: nothing here is a contract of the library.
#pragma once

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

#include "harness.h"
#include "operands.h"
#include "reference/bounds.h"
#include "reference/reference.h"
#include "smax/c/smax.h"
#include "smax/smax.h"

namespace smax_fuzz {
namespace family_internal {

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

// An operand: its view (operands.h: shape, strides, origin in the arena, the
// corruptions) and its kind.
struct Operand : FuzzView {
  const char* name = "";
  bool present = false;
  bool is_bool = false;
};

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
  // Storage dtypes of in0 / in1 / additive_mask (in_dtype) and out
  // (out_dtype), drawn by decode_storage (harness.cc) as in the ops harness
  // (harness_ops_dtypes.cc): typed_in / typed_out mirror the arena's
  // indices; `typed`: view_of hands the library the typed arenas (set once
  // the oracle has run on the arena's rounded values).
  DType in_dtype = DType::kF32, out_dtype = DType::kF32;
  bool typed = false;
  std::vector<unsigned char> typed_in, typed_out;
};

struct Check : FailureLog {
  const Case* c;
};

// ---- harness_decode.cc -----------------------------------------------------------------------

float logit(Reader& r);
float option_float(Reader& r);
void decode(Case& c, Reader& r);
void fill_inputs(Case& c, Reader& r);

// ---- harness.cc ------------------------------------------------------------------------------

extern Stats g_stats;
void reject(Case& c, const std::string& why);
std::string describe(const Case& c);
void dump_operand(const Case& c, const char* name, const Operand& o);
[[noreturn]] void violation(const Case& c, const std::string& what);
TensorView view_of(const Case& c, const Operand& o);
std::string call(const Case& c, const SoftmaxOptions& opt, bool* ok);
bool element_ok(Check& ck, size_t i, float out_f, double ref, double bound, bool exact_zero,
                DType out_dtype = DType::kF32);
void decode_storage(Case& c, Reader& r);
void check_result(Case& c, const std::vector<double>& ref, const std::vector<double>& y,
                  const std::vector<double>& dy);

}  // namespace family_internal
}  // namespace smax_fuzz
