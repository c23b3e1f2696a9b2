// src/kernels/row-inl.h: the per-target row toolkit every smax kernel is
// built from, in one header. Its pieces keep their split by concern, each
// with its own header comment:
//   load-inl.h    lane layout (DF / VF, kUnroll), logit loads with tails, max / min
//   exp-inl.h     the f32 exp (ExpRef, table and flush-free variants, ExpDiff)
//   sum-inl.h     blocked f32 -> float64 sums (F64Acc, BlockSum, LaneSum)
//   pass-inl.h    per-vector passes over one row (RunPass, ExpSum, stores)
//   scan-inl.h    one-read row scans (RowMax, OnlineScanWith and its visitors)
//   xent-inl.h    the cross-entropy row sources, online sums and gradient
//   demote-inl.h  float64 -> f32 rounding as IEEE does it (DemoteIeee); the
//                 softmax / log-softmax backward steps in float64 with it
// Each piece may use those listed before it.
//
// Why one umbrella: Highway compiles the per-target code once per target
// (kernels/*.cc include <hwy/foreach_target.h>, which re-includes the .cc,
// and so this header, with HWY_TARGET_TOGGLE flipped). Such a header needs
// the per-target toggle guard and the HWY_BEFORE_NAMESPACE / namespace / `hn`
// frame; this header is the only one that has them, and it includes its
// pieces inside that frame. A piece therefore holds only per-target code: it
// has no guard, no includes and no namespace of its own, and refuses to be
// included from anywhere else (#error unless SMAX_KERNELS_ROW_INL_PIECE_).
//
// Contract for includers (kernels/*.cc, tests/kernels/*): include this
// header after <hwy/foreach_target.h> and <hwy/highway.h>, outside any
// namespace; everything it declares is in smax::kernels::HWY_NAMESPACE.
// Functions here are templates or HWY_INLINE, so a kernel pays only for what
// it uses.
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
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#define SMAX_KERNELS_ROW_INL_PIECE_
// clang-format off
#include "kernels/load-inl.h"
#include "kernels/exp-inl.h"
#include "kernels/sum-inl.h"
#include "kernels/pass-inl.h"
#include "kernels/scan-inl.h"
#include "kernels/xent-inl.h"
#include "kernels/demote-inl.h"
// clang-format on
#undef SMAX_KERNELS_ROW_INL_PIECE_

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SMAX_KERNELS_ROW_INL_H_
