// Mixed precision as torch.autocast does it: inside an AutocastScope the ops that the policy table
// (autocast.cpp) lists as low-precision ops round their inputs to bf16 or fp16, multiply and add in
// fp32, and round their output; their backward rounds the incoming gradient and the results the
// same way. Every other op computes in fp32; batch norm and add give their output rounded when
// every input is already low precision (keep_input_precision), as bf16 tensors flow through them
// in PyTorch. Master weights and optimizer state stay fp32: a weight is rounded where a product
// uses it, and its gradient arrives back in fp32.
//
// This is the reference path, the one GPU kernels are to be tested against: rounding is a
// separate pass over f32 values (correct, not fast), so it runs on the CPU only. Tensors between
// ops stay f32, and what backward saves of them goes in the low precision where that holds them
// exactly (core/saved_tensor.h), which is where the memory is saved.
//   { AutocastScope scope(Precision::bf16); loss = loss_fn(model(x)); }  loss.backward();
#pragma once

#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"

namespace pac {

enum class Precision { fp32, bf16, fp16 };

// "fp32", "bf16", "fp16"; parse_precision throws on anything else, naming the choices.
const char* precision_name(Precision precision);
Precision parse_precision(const std::string& name);
// The storage type of a low precision (f32 for fp32).
DType precision_dtype(Precision precision);

// The precision of the calling thread's scope (fp32 outside any scope).
Precision autocast_precision();

class AutocastScope {
 public:
  explicit AutocastScope(Precision precision);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  Precision previous_;
};

// What the policy table says an op computes in, given the scope: the low precision for the ops
// it lists as products (matmul, linear, conv2d), fp32 for the others and outside a scope.
Precision autocast_precision_for(const char* op);

// x with every value rounded to `precision` (to nearest even; fp16 overflows to infinity), still
// stored as f32; its backward rounds the incoming gradient the same way. A product op wraps its
// inputs and its output in it, so that forward and backward see exactly the values a bf16/fp16
// kernel with fp32 accumulation would. The identity for fp32.
Tensor round_to_precision(const Tensor& x, Precision precision);

// x's values rounded to `precision` without autograd (x itself for fp32): how a product's
// backward gets back the operands its forward used from the unrounded inputs it kept.
Tensor rounded_values(const Tensor& x, Precision precision);

// The output of an op that the policy table lists as keeping its inputs' precision (batch norm,
// add), as PyTorch's autocast gives it: in the low precision when every input already is (here:
// holds only values the low precision holds exactly), so `out` is then rounded, as a bf16 kernel
// would write it; `out` unchanged otherwise, and outside a scope. This is what keeps a ResNet's
// activations in bf16 from one convolution to the next, and so what backward saves of them.
Tensor keep_input_precision(const char* op, const Tensor& out,
                            std::initializer_list<Tensor> inputs);

// Whether every value of the f32 tensor x is one that `precision` holds exactly (so that storing
// it in bf16 or fp16 loses nothing). True for fp32. CPU tensors only.
bool holds_exactly(const Tensor& x, Precision precision);

}  // namespace pac
