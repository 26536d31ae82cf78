// The autograd engine: every differentiable op records a Node that knows how to turn the
// gradient of its output into gradients of its inputs; backward() sorts the graph and sweeps it in
// reverse. Leaves accumulate into .grad and then fire their grad-ready hooks (the Reducer's cue).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace pac {

class Node {
 public:
  Node();
  virtual ~Node() = default;
  // Returns one gradient per input (undefined where needs_grad(i) is false).
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  virtual std::string name() const = 0;

  bool needs_grad(size_t input) const { return input < next.size() && next[input] != nullptr; }

  // next[i] receives the gradient of input i: that input's grad_fn, or its leaf accumulator, or
  // null when input i does not require a gradient.
  std::vector<std::shared_ptr<Node>> next;
  // Creation order. Among nodes that are ready, the newest runs first, so gradients become
  // ready in reverse order of the forward pass, as DDP's bucketing expects. A leaf's accumulator
  // outlives the graph it was made in, so its creation order would be the oldest of all: it has
  // the largest number instead and runs as soon as its gradient is complete (autograd.cpp).
  uint64_t sequence_nr;
};

// Grad mode is per thread; NoGradGuard turns recording off for a scope (optimizer steps,
// evaluation, the backward pass itself).
struct GradMode {
  static bool enabled();
  static void set_enabled(bool enabled);
};

class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when grad mode is on and any of the inputs requires a gradient.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Makes `node` the grad_fn of `output`, wired to the given inputs (in the order of apply's result).
void attach_grad_fn(Tensor& output, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs);

// Runs the backward pass from `root`; grad_output defaults to 1 for a single-element root.
void run_backward(const Tensor& root, const Tensor& grad_output);

}  // namespace pac
