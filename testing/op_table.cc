// testing/op_table.cc: the op table of op_table.h and the generated inputs
// of one call (shared by `smax run` and bench/bench_ops.cc).
#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>

#include "args.h"
#include "check.h"
#include "data.h"
#include "json.h"
#include "op_table.h"
#include "suggest.h"

namespace smax_cli {
namespace {

smax::TensorView f32_view(float* data, const std::vector<int64_t>& shape) {
  return smax::make_view(data, smax::DType::kF32, static_cast<int>(shape.size()), shape.data(),
                         nullptr);
}
smax::TensorView i64_view(int64_t* data, const std::vector<int64_t>& shape) {
  return smax::make_view(data, smax::DType::kI64, static_cast<int>(shape.size()), shape.data(),
                         nullptr);
}

}  // namespace

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

smax::reference::BoundCall bound_call_of(const ExtCall& c) {
  smax::reference::BoundCall bc;
  bc.x = c.x;
  bc.y = c.y;
  bc.dy = c.dy;
  bc.target = c.target;
  bc.options = c.options;
  bc.loss = c.loss;
  bc.params = c.params;
  return bc;
}

static_assert(smax::kMaxRank == SMAX_MAX_RANK, "one rank limit");

smax_tensor c_tensor(const smax::TensorView& v) {
  smax_tensor t{};
  t.data = v.data;
  t.dtype = static_cast<int32_t>(v.dtype);  // the same values (smax_dtype)
  t.rank = v.rank;
  // Every entry, whatever the rank (a view with a bad rank reaches the C
  // ABI as it is; the C ABI reads the first `rank`).
  for (int d = 0; d < smax::kMaxRank; ++d) {
    t.shape[d] = v.shape[d];
    t.strides[d] = v.strides[d];
  }
  return t;
}

std::unique_ptr<CCall> c_call_of(const ExtCall& c) {
  auto k = std::make_unique<CCall>();
  k->x = c_tensor(c.x);
  k->y = c_tensor(c.y);
  k->dy = c_tensor(c.dy);
  k->target = c_tensor(c.target);
  k->out = c_tensor(c.out);
  k->out_index = c_tensor(c.out_index);
  smax_softmax_options_init(&k->options);
  const smax::SoftmaxOptions& o = c.options;
  k->options.axis = o.axis;
  k->options.scale = o.scale;
  k->options.temperature = o.temperature;
  k->options.algorithm = static_cast<int32_t>(o.algorithm);  // the same values
  k->options.empty_row = static_cast<int32_t>(o.empty_row);
  k->options.threads = o.threads;
  if (o.additive_mask) {
    k->additive_mask = c_tensor(*o.additive_mask);
    k->options.additive_mask = &k->additive_mask;
  }
  if (o.bool_mask) {
    k->bool_mask = c_tensor(*o.bool_mask);
    k->options.bool_mask = &k->bool_mask;
  }
  smax_loss_options_init(&k->loss);
  k->loss.reduction = static_cast<int32_t>(c.loss.reduction);
  k->loss.ignore_index = c.loss.ignore_index;
  k->loss.empty_mean = static_cast<int32_t>(c.loss.empty_mean);
  if (c.loss.weight) {
    k->weight = c_tensor(*c.loss.weight);
    k->loss.weight = &k->weight;
  }
  return k;
}

smax::reference::BoundShape bound_shape_of(const ExtOp& op) {
  smax::reference::BoundShape s;
  s.rows = op.bound_rows;
  s.backward = op.needs_dy;
  s.elementwise = op.out_shape == OutShape::kSame;
  s.loss = op.out_shape == OutShape::kLoss;
  return s;
}

smax::reference::ElementBounds op_bounds(const ExtOp& op, const smax::reference::BoundCall& call,
                                         const std::vector<double>& ref) {
  if (op.check_indices) {  // exact: a bound of 0
    smax::reference::ElementBounds b;
    b.bound.assign(ref.size(), 0.0);
    return b;
  }
  if (!op.bounds) {
    throw smax::Error(smax::Status::kInvalidArgument,
                      "op_bounds: op '" + op.name + "' has no documented elementwise bound");
  }
  return smax::reference::op_bounds(bound_shape_of(op), call, ref, op.bounds);
}

void set_bound_header(std::vector<ExtOp>& ops, size_t first, const char* header) {
  for (size_t i = first; i < ops.size(); ++i) ops[i].bound_header = header;
}

const char* param_type_name(ParamType type) {
  switch (type) {
    case ParamType::kReal: return "real";
    case ParamType::kInt: return "int";
    case ParamType::kBool: return "bool";
  }
  return "?";
}

std::string format_param(const ExtParam& p, double value) {
  switch (p.type) {
    case ParamType::kInt: return std::to_string(static_cast<long long>(value));
    case ParamType::kBool: return value != 0 ? "true" : "false";
    case ParamType::kReal: break;
  }
  return format_number(value);
}

std::string json_param(const ExtParam& p, double value) {
  if (p.type == ParamType::kReal) return json_number(value);
  return format_param(p, value);  // 10 / true are JSON already
}

std::string format_params(const std::vector<ExtParam>& params,
                          const std::map<std::string, double>* values) {
  std::string out;
  for (const ExtParam& p : params) {
    const double v = values != nullptr ? values->at(p.name) : p.fallback;
    out += (out.empty() ? "" : ", ") + p.name + "=" + format_param(p, v);
  }
  return out;
}

namespace {

double parse_param_value(const ExtParam& p, const std::string& text) {
  const std::string what = "--param " + p.name;
  double value = 0;
  switch (p.type) {
    case ParamType::kReal: value = parse_double(what, text); break;
    case ParamType::kInt: {
      const int64_t v = parse_int(what, text);
      if (v > (int64_t{1} << 53) || v < -(int64_t{1} << 53)) {
        throw UsageError(what + ": " + text + " is out of range (|value| <= 2^53)");
      }
      value = static_cast<double>(v);
      break;
    }
    case ParamType::kBool:
      if (text == "true" || text == "1") {
        value = 1;
      } else if (text == "false" || text == "0") {
        value = 0;
      } else {
        throw UsageError(what + ": expected true, false, 1 or 0, got '" + text + "'");
      }
      break;
  }
  if (!p.choices.empty() &&
      std::find(p.choices.begin(), p.choices.end(), value) == p.choices.end()) {
    std::vector<std::string> allowed;
    for (double c : p.choices) allowed.push_back(format_param(p, c));
    throw UsageError(what + ": expected one of " + join_names(allowed) + ", got '" + text + "'");
  }
  return value;
}

}  // namespace

std::map<std::string, double> parse_params(const ExtOp& op, const std::string& text) {
  std::map<std::string, double> params;
  std::vector<std::string> names;
  for (const ExtParam& p : op.params) {
    params[p.name] = p.fallback;
    names.push_back(p.name);
  }
  if (text.empty()) return params;
  if (op.params.empty()) {
    throw UsageError("--param does not apply to op '" + op.name +
                     "' (it has no parameters; `smax info --ops` lists each op's parameters)");
  }
  std::stringstream in(text);
  std::string item;
  std::set<std::string> seen;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      throw UsageError("--param: expected NAME=VALUE, got '" + item + "' (parameters of op '" +
                       op.name + "': " + join_names(names) + ")");
    }
    const std::string name = item.substr(0, eq);
    const auto it = std::find_if(op.params.begin(), op.params.end(),
                                 [&](const ExtParam& p) { return p.name == name; });
    if (it == op.params.end()) {
      throw UsageError("--param: op '" + op.name + "' has no parameter '" + name + "'" +
                       did_you_mean(name, names) + " (its parameters: " + join_names(names) + ")");
    }
    if (!seen.insert(name).second) {
      throw UsageError("--param: '" + name + "' given more than once");
    }
    params[name] = parse_param_value(*it, item.substr(eq + 1));
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

namespace {

// The CLI's ops must be the ops smax/op_list.inc marks "run" (checked
// against a float64 oracle) or "run_unchecked" (none): the table (less the
// softmax family, which check.h runs) in the list's order. A mismatch is a
// defect of the build; it throws at the first use, so every `smax run` and
// every cli test fails, naming the op.
std::vector<ExtOp> in_op_list_order(std::vector<ExtOp> table) {
  std::vector<ExtOp> ordered;
  for (const smax::OpInfo& info : smax::op_list()) {
    const std::string cli = info.cli;
    const bool family = std::string(info.group) == "softmax";
    const auto it = std::find_if(table.begin(), table.end(),
                                 [&](const ExtOp& op) { return op.name == info.name; });
    const bool listed = cli == "run" || cli == "run_unchecked";
    if (family) {
      const auto& fam = softmax_family();
      const bool in_family = std::any_of(fam.begin(), fam.end(),
                                         [&](Op op) { return op_name(op) == std::string(info.name); });
      if (listed != in_family) {
        throw std::logic_error(std::string("op ") + info.name +
                               ": smax/op_list.inc and the CLI's softmax family disagree");
      }
      continue;
    }
    if (!listed) {
      if (it != table.end()) {
        throw std::logic_error(std::string("op ") + info.name + ": the CLI runs it but "
                               "smax/op_list.inc says cli " + cli);
      }
      continue;
    }
    if (it == table.end()) {
      throw std::logic_error(std::string("op ") + info.name +
                             ": smax/op_list.inc says `smax run` runs it, but the CLI's op "
                             "table (testing/table_*.cc) has no entry");
    }
    if ((cli == "run") != static_cast<bool>(it->reference)) {
      throw std::logic_error(std::string("op ") + info.name + ": smax/op_list.inc says cli " +
                             cli + " but the CLI's op table " +
                             (it->reference ? "has" : "has no") + " float64 oracle");
    }
    if (it->reference && !it->check_indices && !it->bounds) {
      throw std::logic_error(std::string("op ") + info.name +
                             ": the CLI's op table has its float64 oracle but no bound rule "
                             "(ExtOp::bounds), so --check and the fuzz group cannot check it");
    }
    ordered.push_back(std::move(*it));
    table.erase(it);
  }
  if (!table.empty()) {
    throw std::logic_error("op " + table.front().name +
                           ": in the CLI's op table but not in smax/op_list.inc");
  }
  return ordered;
}

}  // namespace

const std::vector<ExtOp>& ext_ops() {
  static const std::vector<ExtOp> ops = [] {
    std::vector<ExtOp> v;
    add_sparse_ops(v);
    add_rescaled_ops(v);
    add_reweight_ops(v);
    add_loss_ops(v);
    add_sampling_ops(v);
    add_quantized_ops(v);
    return in_op_list_order(std::move(v));
  }();
  return ops;
}

std::vector<std::string> all_op_names() {
  std::vector<std::string> names;
  for (Op op : softmax_family()) names.push_back(op_name(op));
  for (const ExtOp& op : ext_ops()) names.push_back(op.name);
  return names;
}

const ExtOp* find_ext_op(const std::string& name) {
  for (const ExtOp& op : ext_ops()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

}  // namespace smax_cli
