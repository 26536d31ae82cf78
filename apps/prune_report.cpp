#include "apps/prune_report.h"

#include "apps/checkpoint.h"
#include "apps/data/loader.h"
#include "core/generator.h"
#include "core/ops.h"
#include "prune/pruner.h"
#include "prune/report.h"

namespace pac {

std::string run_prune_report(const PruneReportOptions& options) {
  const TrainOptions& o = options.train;
  PAC_CHECK(options.world >= 1, "--world {} must be at least 1", options.world);
  default_generator().manual_seed(o.seed);
  data::Dataset data = load_dataset(o, true);
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
    data::Loader loader(data, {std::min<int64_t>(o.batch, data.size()), false, 0, 0, 1, false});
    data::Batch batch = loader.batch(0);
    prune::ScoreContext context;
    context.input_shape = batch.images.shape();
    context.compute_gradients = [&] {
      model->zero_grad();
      cross_entropy((*model)(batch.images), batch.labels).backward();
    };
    pruner.prune_to(o.sparsity, context);
    out += fmt::format("pruning: {}\n", pruner.describe());
  }
  prune::ReportOptions report{
      {1, config.in_channels, config.image_size, config.image_size},
      o.bucket_mb,
      o.first_bucket_mb,
      o.compress_options.count("enc") ? o.compress_options.at("enc") : "fp32",
      options.world};
  out += fmt::format("{} on {}x{}x{} inputs\n", model->describe(), config.in_channels,
                     config.image_size, config.image_size);
  return out + prune::prune_report(*model, report);
}

}  // namespace pac
