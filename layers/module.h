// Module: the base of every layer and model. Parameters, buffers (e.g. batch-norm running
// statistics) and child modules are registered by name in a fixed order, so named_parameters()
// yields the same dotted names ("layer1.0.conv1.weight") in the same order on every rank.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "layers/parameter.h"

namespace pac::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Calls forward(); records the output shape when a summary is being taken.
  Tensor operator()(const Tensor& x);
  virtual Tensor forward(const Tensor& x) = 0;
  // One line: the layer and its configuration, e.g. "Conv2d(3, 16, kernel=3, stride=1)".
  virtual std::string describe() const = 0;
  // What forward() takes: f32 values, or integer indices for a model that starts with an
  // embedding (a language model takes i64 tokens). Summaries and criteria build inputs with it.
  virtual DType input_dtype() const { return DType::f32; }

  std::vector<std::pair<std::string, ParameterPtr>> named_parameters() const;
  std::vector<ParameterPtr> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, ModulePtr>> named_children() const { return children_; }
  // This module (name "") and every descendant, depth first, in registration order.
  std::vector<std::pair<std::string, Module*>> named_modules();
  int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Every module's own train/eval flag, in named_modules() order, and back: for code that
  // switches a model (or only its normalisation layers) and must leave each module as it was.
  std::vector<bool> training_modes();
  void set_training_modes(const std::vector<bool>& modes);
  // Zeroes every gradient in place (a gradient may be a view into a communication bucket).
  void zero_grad();
  // Moves every parameter and buffer, here and in every descendant, to `device` in place, as
  // PyTorch's module.to(device). Do it before making the optimizer's state or the Reducer.
  void to(Device device);

  // A table of layer, output shape and parameter count, from one forward pass on zeros of
  // `input_shape`, ending with the total parameter count.
  std::string summary(const Shape& input_shape);
  // The output shape of every module called during that forward pass, by dotted name ("" for the
  // model), in call order; FLOP counts use it.
  std::vector<std::pair<std::string, Shape>> output_shapes(const Shape& input_shape);

 protected:
  ParameterPtr register_parameter(const std::string& name, Tensor data);
  void register_buffer(const std::string& name, Tensor buffer);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  void add_child(const std::string& name, ModulePtr module);
  void check_new_name(const std::string& name) const;

  std::vector<std::pair<std::string, ParameterPtr>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  bool training_ = true;
};

}  // namespace pac::nn
