#include "apps/prune_report.h"

#include "apps/checkpoint.h"
#include "apps/train_step.h"
#include "comm/compressors/pactrain.h"
#include "core/generator.h"
#include "core/ops.h"
#include "prune/pruner.h"
#include "prune/report.h"

namespace pac {

std::string run_prune_report(const PruneReportOptions& options) {
  const TrainOptions& o = options.train;
  PAC_CHECK(options.world >= 1, "--world {} must be at least 1", options.world);
  default_generator().manual_seed(o.seed);
  RunData data = load_run_data(o, true);
  models::ModelConfig config =
      options.checkpoint.empty() ? o.model : read_checkpoint_config(options.checkpoint);
  config = resolve_model_config(config, data);
  nn::ModulePtr model = models::make_model(config);
  if (!options.checkpoint.empty()) load_checkpoint(options.checkpoint, config, *model, nullptr);

  std::string out;
  if (!o.prune.empty()) {
    prune::Pruner pruner(*model,
                         prune::PrunerOptions{o.prune, o.sparsity, o.prune_scope, "oneshot:0",
                                              o.prune_exclude, o.seed, 0, o.prune_options},
                         comm::make_local_group());
    // Criteria that need a gradient get one batch of the training data.
    TrainOptions first = o;
    if (!data.is_text()) first.batch = std::min<int64_t>(o.batch, data.train_samples());
    data::Batch batch = make_train_loader(data, first, config, 0, 1, false)->batch(0);
    prune::ScoreContext context;
    context.input_shape = batch.inputs.shape();
    context.compute_gradients = [&] {
      model->zero_grad();
      batch_loss((*model)(batch.inputs), batch.targets).backward();
    };
    pruner.prune_to(o.sparsity, context);
    out += fmt::format("pruning: {}\n", pruner.describe());
  }
  prune::ReportOptions report{
      models::example_input_shape(config),
      o.bucket_mb,
      o.first_bucket_mb,
      o.compress_options.count("enc") ? o.compress_options.at("enc") : "fp32",
      options.world,
      comm::pactrain_levels(o.compress_options)};
  out += fmt::format("{} on {} inputs\n", model->describe(),
                     fmt::join(models::example_input_shape(config), "x"));
  return out + prune::prune_report(*model, report);
}

}  // namespace pac
