// tests/kernels/kernel_target-inl.h: the per-target scaffold every kernel
// test file (tests/kernels/test_kernel_*.cc) shares. Included in a file's
// per-target part, after <hwy/highway.h>, and re-included for every target
// like src/kernels/*-inl.h:
//  * per target: KtTarget(), the name of the target that copy was built for,
//    KtRefMaxAbs(), exp-inl.h's kRefMaxAbs, and KtLanes(), the f32 lanes;
//  * once (HWY_ONCE): its dispatch table and KernelTest, the per-target
//    fixture (TargetTest under the cap) whose SetUp checks that the file's
//    entry points really dispatch to the capped target.

// Per-target include guard (the Highway idiom).
#if defined(SMAX_TESTS_KERNEL_TARGET_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SMAX_TESTS_KERNEL_TARGET_INL_H_
#undef SMAX_TESTS_KERNEL_TARGET_INL_H_
#else
#define SMAX_TESTS_KERNEL_TARGET_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>

#include "kernels/row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace smax::kernels::HWY_NAMESPACE {

inline const char* KtTarget() { return hwy::TargetName(HWY_TARGET); }
inline float KtRefMaxAbs() { return kRefMaxAbs; }
inline size_t KtLanes() { return hn::Lanes(DF()); }

}  // namespace smax::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard

#if HWY_ONCE && !defined(SMAX_TESTS_KERNEL_TARGET_ONCE_)
#define SMAX_TESTS_KERNEL_TARGET_ONCE_

#include <gtest/gtest.h>

#include "kernel_test.h"
#include "test_util.h"

namespace smax::kernels {
HWY_EXPORT(KtTarget);
HWY_EXPORT(KtRefMaxAbs);
HWY_EXPORT(KtLanes);

class KernelTest : public smax_test::TargetTest {
 protected:
  void SetUp() override {
    TargetTest::SetUp();
    ASSERT_EQ(smax_kernel_test::Lower(HWY_DYNAMIC_DISPATCH(KtTarget)()),
              smax_kernel_test::Lower(GetParam()))
        << "the kernel test's entry points did not dispatch to the capped target";
  }
};

}  // namespace smax::kernels
#endif  // HWY_ONCE
