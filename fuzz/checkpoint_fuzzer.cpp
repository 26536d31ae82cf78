// Fuzz target: the checkpoint loader, from the safetensors bytes to the model, its masks, the
// optimizer state and the per-rank run state, for the small model of fuzz/model.h. Any
// pac::Error is the loader refusing a bad file; anything else is a finding.
#include <cstddef>
#include <cstdint>

#include "apps/checkpoint.h"
#include "fuzz/model.h"
#include "optim/sgd.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static pac::nn::ModulePtr model = pac::models::make_model(pac::fuzz::model_config());
  static pac::optim::Sgd optimizer(model->named_parameters(), {0.1f, 0.9f});
  try {
    pac::TensorFile file = pac::parse_safetensors(data, size, "fuzz-input");
    pac::load_checkpoint(std::move(file), "fuzz-input", pac::fuzz::model_config(), *model,
                         &optimizer);
  } catch (const pac::Error&) {
  }
  return 0;
}
