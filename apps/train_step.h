// One data-parallel training step as llm.c writes it: forward, zero, backward, reduce, update.
// Everything else a run does (the learning-rate schedule, pruning events, injected faults,
// metrics, checkpoints) happens around it, in apps/trainer.cpp.
#pragma once

#include <functional>
#include <string>

#include "apps/data/loader.h"
#include "comm/reducer.h"
#include "core/autocast.h"
#include "layers/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace pac {

struct StepSettings {
  float label_smoothing = 0.0f;
  float clip_grad = 0.0f;  // > 0: clip the global gradient norm to this before the update
  // Runs once the averaged gradients are in place and before the update, when the step is
  // applied (a pruning criterion's observe()).
  std::function<void()> after_reduce;
  bool poison_loss = false;  // the nan-loss fault: the loss becomes NaN
  // --precision: forward runs under autocast (core/autocast.h); fp16 scales the loss by `scaler`
  // (null otherwise), which the step also updates with its verdict.
  Precision precision = Precision::fp32;
  optim::GradScaler* scaler = nullptr;
};

struct StepOutcome {
  float loss = 0.0f;
  comm::ReducerStepStats comm;  // zeros without a Reducer
  // The step was not applied because some rank's gradient or loss was not finite; `nonfinite`
  // names this rank's culprit ("loss" or a parameter), "" when another rank found it.
  bool skipped = false;
  std::string nonfinite;
  // The loss scale the step ran with when it was skipped under fp16 loss scaling (0 otherwise):
  // a gradient that overflowed there is the scale's back-off, not a fault.
  float overflowed_scale = 0.0f;
};

// The mean cross-entropy of a batch: logits [B, classes] against labels [B], or a sequence
// model's logits [B, T, vocab] against next tokens [B, T] (every position counts once).
Tensor batch_loss(const Tensor& logits, const Tensor& targets, float label_smoothing = 0.0f);

// `params` are the model's (named_parameters(), made once). The Reducer may be null (one process,
// dense): then this rank checks its own gradients.
StepOutcome train_step(nn::Module& model, const optim::NamedParameters& params,
                       optim::Optimizer& optimizer, comm::Reducer* reducer,
                       const data::Batch& batch, const StepSettings& settings);

}  // namespace pac
