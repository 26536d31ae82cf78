// Training checkpoints in safetensors: every parameter under its own name
// ("layer1.0.conv1.weight"), its pruning mask as "<name>.mask", every buffer ("bn1.running_mean"),
// the optimizer state as "optimizer.<parameter>.<slot>", the pruner's state as "pruner.<key>", the
// gradient buckets' grouping as "reducer.buckets", fp16's loss scale as "grad_scaler.<key>", each
// rank's compressor and generator state as "rank<r>.<key>" (apps/run_state.h), and in the
// metadata the model configuration, the position in the run and the compressor and criterion
// names. A checkpoint of another model is refused by name. The file carries a CRC-32 that
// loading checks.
#pragma once

#include <string>

#include "apps/models/registry.h"
#include "apps/run_state.h"
#include "apps/safetensors.h"
#include "optim/optimizer.h"

namespace pac {

struct RunPosition {
  int64_t step = 0;   // optimizer steps taken
  int64_t epoch = 0;  // epoch the next step belongs to
  int64_t batch = 0;  // batch index within that epoch
  int64_t world_size = 1;
  int64_t global_batch = 0;  // the samples of one step, all ranks together (0: not recorded)
};

std::string model_config_json(const models::ModelConfig& config);
models::ModelConfig model_config_from_json(const std::string& json, const std::string& path);

// `recipe`: the run's options (apps/recipe.h), kept in the metadata so `--config` can rerun it.
void save_checkpoint(const std::string& path, const models::ModelConfig& config, nn::Module& model,
                     const optim::Optimizer* optimizer, const RunPosition& position,
                     const std::string& optimizer_name, const RunState& run,
                     const std::string& recipe = "");

// The bytes a checkpoint of this run takes, as every rank can count them (weights, buffers,
// optimizer state, and `world` times one rank's own state): for how long the others wait while
// rank 0 writes it.
uint64_t checkpoint_bytes(const nn::Module& model, const optim::Optimizer* optimizer,
                          const StateDict& rank_state, int world);

struct LoadedCheckpoint {
  models::ModelConfig config;
  RunPosition position;
  std::string optimizer_name;
  RunState run;  // for restore_run_state()
};
// Reads the configuration only (to build the model for `pactrain eval`).
models::ModelConfig read_checkpoint_config(const std::string& path);
// Loads weights, masks and buffers into `model` (and the optimizer state when given; then the
// file must be one a run can resume from). Throws if the file belongs to a different model
// configuration than `expected`.
LoadedCheckpoint load_checkpoint(const std::string& path, const models::ModelConfig& expected,
                                 nn::Module& model, optim::Optimizer* optimizer);
// The same from a file already read (`path` names it in errors).
LoadedCheckpoint load_checkpoint(TensorFile file, const std::string& path,
                                 const models::ModelConfig& expected, nn::Module& model,
                                 optim::Optimizer* optimizer);

}  // namespace pac
