// tests/test_util.cc: implementation of the shared test helpers.
#include "test_util.h"

#include <cctype>

#include "reference/reference.h"

namespace smax_test {

std::vector<double> reference_forward(Op op, const TensorView& src, const SoftmaxOptions& o) {
  switch (op) {
    case Op::kSoftmax: return smax::reference::softmax(src, o);
    case Op::kLogSoftmax: return smax::reference::log_softmax(src, o);
    case Op::kLogsumexp: return smax::reference::logsumexp(src, o);
    default: break;
  }
  ADD_FAILURE() << "reference_forward: not a forward op";
  return {};
}

std::vector<double> reference_backward(Op op, const TensorView& y, const TensorView& dy,
                                       const SoftmaxOptions& o) {
  if (op == Op::kSoftmaxBackward) return smax::reference::softmax_backward(y, dy, o);
  return smax::reference::log_softmax_backward(y, dy, o);
}

void library_forward(Op op, const TensorView& src, const TensorView& dst,
                     const SoftmaxOptions& o) {
  switch (op) {
    case Op::kSoftmax: smax::softmax(src, dst, o); return;
    case Op::kLogSoftmax: smax::log_softmax(src, dst, o); return;
    case Op::kLogsumexp: smax::logsumexp(src, dst, o); return;
    default: break;
  }
  ADD_FAILURE() << "library_forward: not a forward op";
}

void library_backward(Op op, const TensorView& y, const TensorView& dy, const TensorView& dx,
                      const SoftmaxOptions& o) {
  if (op == Op::kSoftmaxBackward) {
    smax::softmax_backward(y, dy, dx, o);
  } else {
    smax::log_softmax_backward(y, dy, dx, o);
  }
}

std::vector<double> to_dense(const TensorView& v) { return smax::reference::to_dense(v); }

void make_saved_output(Op op, const Tensor& src, const SoftmaxOptions& o, Tensor& y) {
  const Op fwd = op == Op::kSoftmaxBackward ? Op::kSoftmax : Op::kLogSoftmax;
  const std::vector<double> ref = reference_forward(fwd, src.view(), o);
  y.fill([&](int64_t i) { return static_cast<float>(ref[static_cast<size_t>(i)]); });
}

namespace {
Geometry geometry_of(const std::vector<int64_t>& shape, int64_t axis) {
  if (shape.empty()) return Geometry({1}, 0);
  return Geometry(shape, static_cast<int>(axis));
}
}  // namespace

::testing::AssertionResult check_op(Op op, const Tensor& src, Tensor& dst,
                                    const SoftmaxOptions& o, Rng& rng,
                                    const std::string& what) {
  dst.poison();
  const std::string label = std::string(op_name(op)) + " " + what;
  try {
    ::testing::AssertionResult result = ::testing::AssertionSuccess();
    if (!is_backward(op)) {
      library_forward(op, src.view(), dst.view(), o);
      const std::vector<double> out = to_dense(dst.view());
      const std::vector<double> ref = reference_forward(op, src.view(), o);
      result = op == Op::kSoftmax ? check_softmax(out, ref, label) : check_log(out, ref, label);
    } else {
      Tensor y(src.shape(), src.strides(), 1);
      Tensor dy(dst.shape(), dst.strides(), 3);
      make_saved_output(op, src, o, y);
      fill_normal(dy, rng);
      SoftmaxOptions ob = o;  // backward needs no masks
      ob.additive_mask.reset();
      ob.bool_mask.reset();
      library_backward(op, y.view(), dy.view(), dst.view(), ob);
      const std::vector<double> out = to_dense(dst.view());
      const std::vector<double> ref = reference_backward(op, y.view(), dy.view(), ob);
      result = check_backward(op == Op::kLogSoftmaxBackward, out, ref, to_dense(y.view()),
                              to_dense(dy.view()), geometry_of(src.shape(), o.axis),
                              static_cast<double>(eff_scale(o)), label);
      if (!y.guards_intact() || !dy.guards_intact()) {
        return ::testing::AssertionFailure() << label << ": an input was modified";
      }
    }
    if (!result) return result;
    if (!dst.guards_intact()) {
      return ::testing::AssertionFailure() << label << ": wrote outside dst's view";
    }
    return result;
  } catch (const smax::Error& e) {
    return ::testing::AssertionFailure() << label << ": threw smax::Error("
                                         << static_cast<int>(e.status()) << "): " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << label << ": threw " << e.what();
  }
}

::testing::AssertionResult check_contiguous(Op op, const std::vector<int64_t>& shape,
                                            int axis, Data data, const SoftmaxOptions& o,
                                            Rng& rng, int64_t misalign) {
  Tensor src(shape, {}, misalign);
  fill_rows(src, axis, data, rng);
  std::vector<int64_t> dshape = op == Op::kLogsumexp ? drop_axis(shape, axis) : shape;
  Tensor dst(dshape, {}, misalign);
  SoftmaxOptions oo = o;
  oo.axis = axis;
  std::ostringstream what;
  what << shape_str(shape) << " axis " << axis << " " << data_name(data) << " "
       << algo_str(o.algorithm) << " misalign " << misalign;
  return check_op(op, src, dst, oo, rng, what.str());
}

::testing::AssertionResult throws_invalid(const std::function<void()>& f,
                                          const std::string& needle) {
  try {
    f();
  } catch (const smax::Error& e) {
    if (e.status() != smax::Status::kInvalidArgument) {
      return ::testing::AssertionFailure()
             << "status " << static_cast<int>(e.status()) << " (not kInvalidArgument): "
             << e.what();
    }
    if (std::string(e.what()).find(needle) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << e.what() << "\" does not name \"" << needle << "\"";
    }
    return ::testing::AssertionSuccess() << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-smax exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw (expected one naming \"" << needle
                                       << "\")";
}

const std::string& initial_target() {
  static const std::string t = [] {
    const std::vector<std::string> s = smax::supported_targets();
    return s.empty() ? std::string() : s.front();
  }();
  return t;
}

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

void TargetTest::SetUp() {
  initial_target();
  smax::set_max_target(GetParam());
  ASSERT_EQ(lower(smax::active_target()), lower(GetParam()))
      << "set_max_target(" << GetParam() << ") did not make it the active target";
  // Querying the target can undo the cap for later dispatches (see
  // Runtime.TargetCapSurvivesQueries); cap again so this test's body really
  // runs on GetParam(). TearDown checks that it still does.
  smax::set_max_target(GetParam());
}

void TargetTest::TearDown() {
  const std::string name = smax::kernel_name("softmax", "auto", 1000);
  EXPECT_NE(name.find("__" + lower(GetParam()) + "_"), std::string::npos)
      << "kernels no longer dispatch to the capped target " << GetParam() << " (" << name
      << ")";
  smax::set_max_target(initial_target());
}

}  // namespace smax_test
