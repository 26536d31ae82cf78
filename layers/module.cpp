#include "layers/module.h"

#include <unordered_map>

#include "core/autograd.h"

namespace pac::nn {

namespace {

// While Module::summary runs, every module call appends a row here.
struct SummaryRow {
  std::string name, description, output;
  Shape shape;
  int64_t parameters = 0;
};
struct SummaryRecorder {
  std::unordered_map<const Module*, std::string> names;
  std::vector<SummaryRow> rows;
};
thread_local SummaryRecorder* active_recorder = nullptr;

}  // namespace

Tensor Module::operator()(const Tensor& x) {
  if (!active_recorder) return forward(x);
  size_t row = active_recorder->rows.size();
  auto it = active_recorder->names.find(this);
  int64_t own = 0;
  for (const auto& [name, p] : parameters_) own += p->numel();
  active_recorder->rows.push_back(
      {it == active_recorder->names.end() ? "?" : it->second, describe(), "", {}, own});
  Tensor y = forward(x);
  active_recorder->rows[row].output = shape_str(y.shape());
  active_recorder->rows[row].shape = y.shape();
  return y;
}

void Module::check_new_name(const std::string& name) const {
  PAC_CHECK(!name.empty() && name.find('.') == std::string::npos,
            "Module: name '{}' must be non-empty and contain no '.'", name);
  for (const auto& [n, p] : parameters_)
    PAC_CHECK(n != name, "Module: '{}' registered twice", name);
  for (const auto& [n, b] : buffers_) PAC_CHECK(n != name, "Module: '{}' registered twice", name);
  for (const auto& [n, c] : children_) PAC_CHECK(n != name, "Module: '{}' registered twice", name);
}

ParameterPtr Module::register_parameter(const std::string& name, Tensor data) {
  check_new_name(name);
  auto p = std::make_shared<Parameter>(std::move(data));
  parameters_.emplace_back(name, p);
  return p;
}

void Module::register_buffer(const std::string& name, Tensor buffer) {
  check_new_name(name);
  buffers_.emplace_back(name, std::move(buffer));
}

void Module::add_child(const std::string& name, ModulePtr module) {
  check_new_name(name);
  PAC_CHECK(module != nullptr, "Module: child '{}' is null", name);
  children_.emplace_back(name, std::move(module));
}

std::vector<std::pair<std::string, ParameterPtr>> Module::named_parameters() const {
  std::vector<std::pair<std::string, ParameterPtr>> out(parameters_);
  for (const auto& [child_name, child] : children_) {
    for (auto& [name, p] : child->named_parameters()) out.emplace_back(child_name + "." + name, p);
  }
  return out;
}

std::vector<ParameterPtr> Module::parameters() const {
  std::vector<ParameterPtr> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out(buffers_);
  for (const auto& [child_name, child] : children_) {
    for (auto& [name, b] : child->named_buffers()) out.emplace_back(child_name + "." + name, b);
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (const auto& [child_name, child] : children_) {
    for (auto& [name, m] : child->named_modules()) {
      out.emplace_back(name.empty() ? child_name : child_name + "." + name, m);
    }
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t total = 0;
  for (const auto& [name, p] : named_parameters()) total += p->numel();
  return total;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

std::vector<bool> Module::training_modes() {
  std::vector<bool> modes;
  for (auto& [name, m] : named_modules()) modes.push_back(m->training_);
  return modes;
}

void Module::set_training_modes(const std::vector<bool>& modes) {
  auto modules = named_modules();
  PAC_CHECK(modes.size() == modules.size(), "set_training_modes: {} flags for the {} modules of {}",
            modes.size(), modules.size(), describe());
  for (size_t i = 0; i < modules.size(); ++i) modules[i].second->training_ = modes[i];
}

void Module::to(Device device) {
  for (auto& [name, p] : named_parameters()) p->to(device);
  for (auto& [name, b] : named_buffers()) b.move_to_(device);
}

void Module::zero_grad() {
  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) {
    Tensor g = p->grad();
    if (g.defined()) g.zero_();
  }
}

namespace {

// One forward pass on zeros, in evaluation mode, recording every module call.
std::vector<SummaryRow> record_calls(Module& model, const Shape& input_shape) {
  SummaryRecorder recorder;
  for (auto& [name, m] : model.named_modules()) recorder.names[m] = name;
  const std::vector<bool> modes = model.training_modes();
  model.eval();
  active_recorder = &recorder;
  try {
    NoGradGuard no_grad;
    model(Tensor::zeros(input_shape, model.input_dtype()));
  } catch (...) {
    active_recorder = nullptr;
    model.set_training_modes(modes);
    throw;
  }
  active_recorder = nullptr;
  model.set_training_modes(modes);
  return recorder.rows;
}

}  // namespace

std::vector<std::pair<std::string, Shape>> Module::output_shapes(const Shape& input_shape) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& r : record_calls(*this, input_shape)) out.emplace_back(r.name, r.shape);
  return out;
}

std::string Module::summary(const Shape& input_shape) {
  std::vector<SummaryRow> rows = record_calls(*this, input_shape);
  for (auto& r : rows) {
    if (r.name.empty()) r.name = "(model)";
  }
  SummaryRecorder recorder;
  recorder.rows = std::move(rows);

  size_t name_width = 5, describe_width = 5;
  for (const auto& r : recorder.rows) {
    name_width = std::max(name_width, r.name.size());
    describe_width = std::max(describe_width, r.description.size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {:<18}  {:>12}\n", "layer", name_width, "module",
                                describe_width, "output", "parameters");
  for (const auto& r : recorder.rows) {
    out += fmt::format("{:<{}}  {:<{}}  {:<18}  {:>12}\n", r.name, name_width, r.description,
                       describe_width, r.output, r.parameters);
  }
  out += fmt::format("total parameters: {}\n", num_parameters());
  return out;
}

}  // namespace pac::nn
