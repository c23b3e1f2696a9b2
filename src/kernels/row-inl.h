// src/kernels/row-inl.h: the per-target row toolkit every smax kernel
// builds on, one part per concern (each part's header states its contract):
//
//   load-inl.h    lane layout (DF / VF, kUnroll), logit loading with tails,
//                 tail loads / stores, horizontal max / min
//   exp-inl.h     the f32 exp (ExpRef, its flush-free and table variants,
//                 ExpDiff) and its constants
//   sum-inl.h     blocked f32 -> float64 sums (F64Acc, BlockSum, LaneSum)
//   pass-inl.h    per-vector passes over one row (RunPass, ExpSum, the
//                 stores e_i * factor, log-softmax stores, Fill)
//   scan-inl.h    the row scans (RowMax, RowMinMaxWith, RowHasNaN) and
//                 OnlineScanWith, the one online scan, with its visitors
//   xent-inl.h    the cross-entropy row pieces (row sources, carried sums,
//                 the one-write gradient)
//   demote-inl.h  float64 -> f32 rounding as IEEE does it (DemoteIeee)
//
// The parts are not headers of their own: they are included only from here,
// in this order (each uses the ones above it), inside this header's
// per-target namespace. So the per-target toggle guard, the standard and
// Highway includes and the namespace are written once, and a kernel .cc
// includes this one header after <hwy/foreach_target.h>.
#if defined(SMAX_KERNELS_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SMAX_KERNELS_ROW_INL_H_
#undef SMAX_KERNELS_ROW_INL_H_
#else
#define SMAX_KERNELS_ROW_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// IWYU pragma: begin_exports
#include "kernels/load-inl.h"
#include "kernels/exp-inl.h"
#include "kernels/sum-inl.h"
#include "kernels/pass-inl.h"
#include "kernels/scan-inl.h"
#include "kernels/xent-inl.h"
#include "kernels/demote-inl.h"
// IWYU pragma: end_exports

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SMAX_KERNELS_ROW_INL_H_
