#include "apps/train_step.h"

#include <cmath>

#include "core/ops.h"
#include "layers/finite.h"
#include "optim/clip.h"

namespace pac {

Tensor batch_loss(const Tensor& logits, const Tensor& targets, float label_smoothing) {
  if (logits.dim() == 3) {
    const int64_t rows = logits.size(0) * logits.size(1);
    return cross_entropy(reshape(logits, {rows, logits.size(2)}), reshape(targets, {rows}),
                         label_smoothing);
  }
  return cross_entropy(logits, targets, label_smoothing);
}

StepOutcome train_step(nn::Module& model, const optim::NamedParameters& params,
                       optim::Optimizer& optimizer, comm::Reducer* reducer,
                       const data::Batch& batch, const StepSettings& settings) {
  StepOutcome out;
  Tensor loss;
  {
    MemoryTagScope tag(MemoryTag::activations);
    AutocastScope autocast(settings.precision);
    loss = batch_loss(model(batch.inputs), batch.targets, settings.label_smoothing);
    if (settings.poison_loss) loss = mul_scalar(loss, NAN);
  }
  const Tensor backward_root = settings.scaler ? settings.scaler->scale_loss(loss) : loss;
  optimizer.zero_grad();
  // On the CPU the loss is read before backward, so that the step's finiteness verdict travels
  // with the last bucket instead of in a collective of its own after it; on a GPU, reading it
  // here would hold back backward's launches.
  if (reducer && !loss.is_cuda()) reducer->declare_loss_finite(std::isfinite(loss.item()));
  {
    MemoryTagScope tag(MemoryTag::backward);
    backward_root.backward();  // full buckets are all-reduced while backward goes on
  }
  // Read after backward is queued, so that on a GPU the wait does not hold back its launches.
  out.loss = loss.item();
  if (reducer) {
    // Every rank learns whether any rank's gradient or loss was not finite.
    out.comm = reducer->finalize(std::isfinite(out.loss));
    out.skipped = out.comm.nonfinite;
    out.nonfinite = out.comm.nonfinite_in;
  } else {
    out.nonfinite = std::isfinite(out.loss) ? nn::first_nonfinite_gradient(params) : "loss";
    out.skipped = !out.nonfinite.empty();
  }
  if (settings.scaler) {
    if (out.skipped && std::isfinite(out.loss)) out.overflowed_scale = settings.scaler->scale();
    settings.scaler->update(!out.skipped);
  }
  if (out.skipped) return out;
  if (settings.scaler) settings.scaler->unscale(params);
  if (settings.after_reduce) settings.after_reduce();
  if (settings.clip_grad > 0.0f) optim::clip_grad_norm(params, settings.clip_grad);
  optimizer.step();
  return out;
}

}  // namespace pac
