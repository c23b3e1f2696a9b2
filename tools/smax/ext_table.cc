// tools/smax/ext_table.cc: the op table of ext_ops.h and the generated inputs
// of one call (shared by `smax run` and bench/bench_ops.cc).
#include <sstream>

#include "args.h"
#include "check.h"
#include "data.h"
#include "ext_ops.h"

namespace smax_cli {
namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

smax::TensorView f32_view(float* data, const std::vector<int64_t>& shape) {
  return smax::make_view(data, smax::DType::kF32, static_cast<int>(shape.size()), shape.data(),
                         nullptr);
}
smax::TensorView i64_view(int64_t* data, const std::vector<int64_t>& shape) {
  return smax::make_view(data, smax::DType::kI64, static_cast<int>(shape.size()), shape.data(),
                         nullptr);
}

}  // namespace

std::map<std::string, double> parse_params(const ExtOp& op, const std::string& text) {
  std::map<std::string, double> params;
  for (const ExtParam& p : op.params) params[p.name] = p.fallback;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    if (eq == std::string::npos || params.count(name) == 0) {
      std::string known;
      for (const ExtParam& p : op.params) known += (known.empty() ? "" : ", ") + p.name;
      throw UsageError("--param: '" + item + "' is not NAME=VALUE with NAME one of {" + known +
                       "} for op " + op.name);
    }
    params[name] = parse_double("--param " + name, item.substr(eq + 1));
  }
  return params;
}

std::unique_ptr<ExtInstance> make_instance(const ExtOp& op, const std::vector<int64_t>& shape,
                                           ExtCall call, const Dist& dist, uint64_t seed) {
  auto inst = std::make_unique<ExtInstance>();
  ExtInstance& I = *inst;
  I.shape = shape;
  const Geometry geo = make_geometry(shape, call.options.axis);
  std::vector<int64_t> rows_shape = shape;
  rows_shape.erase(rows_shape.begin() + geo.axis);
  // Shape of what the forward op writes.
  std::vector<int64_t> fwd_shape = shape;
  switch (op.out_shape) {
    case OutShape::kSame: break;
    case OutShape::kRows: fwd_shape[static_cast<size_t>(geo.axis)] = 1; break;
    case OutShape::kLoss:
      fwd_shape = call.loss.reduction == smax::Reduction::kNone ? rows_shape : std::vector<int64_t>{};
      break;
    case OutShape::kTopK:
      fwd_shape[static_cast<size_t>(geo.axis)] = static_cast<int64_t>(call.params.at("k"));
      break;
  }
  const int64_t count = product(shape);
  I.x.resize(static_cast<size_t>(count));
  fill(I.x.data(), I.x.size(), dist, seed);
  call.x = f32_view(I.x.data(), I.shape);
  if (op.needs_target) {
    I.target.resize(static_cast<size_t>(product(rows_shape)));
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 7;
    for (auto& t : I.target) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      t = static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(std::max<int64_t>(geo.n, 1)));
    }
    call.target = i64_view(I.target.data(), rows_shape);
  }
  if (op.forward) {
    I.y.resize(static_cast<size_t>(count));
    ExtCall fwd = call;
    fwd.out = f32_view(I.y.data(), I.shape);
    op.forward(fwd);
    call.y = fwd.out;
  }
  // Backward ops write dsrc (x's shape) from dy: x's shape, or the loss's
  // shape (dloss) for loss backward ops.
  I.out_shape = op.needs_dy ? shape : fwd_shape;
  if (op.needs_dy) {
    const std::vector<int64_t> dshape = op.out_shape == OutShape::kLoss ? fwd_shape : shape;
    I.dy.resize(static_cast<size_t>(std::max<int64_t>(product(dshape), 1)));
    fill(I.dy.data(), static_cast<size_t>(product(dshape)), Dist{}, seed + 0x5eed);
    call.dy = f32_view(I.dy.data(), dshape);
  }
  I.out.resize(static_cast<size_t>(std::max<int64_t>(product(I.out_shape), 1)));
  call.out = f32_view(I.out.data(), I.out_shape);
  if (op.index_output) {
    I.out_index.resize(I.out.size());
    call.out_index = i64_view(I.out_index.data(), I.out_shape);
  }
  I.call = call;
  return inst;
}

const std::vector<ExtOp>& ext_ops() {
  static const std::vector<ExtOp> ops = [] {
    std::vector<ExtOp> v;
    add_sparse_ops(v);
    add_rescaled_ops(v);
    add_reweight_ops(v);
    add_loss_ops(v);
    add_sampling_ops(v);
    return v;
  }();
  return ops;
}

const ExtOp* find_ext_op(const std::string& name) {
  for (const ExtOp& op : ext_ops()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

}  // namespace smax_cli
