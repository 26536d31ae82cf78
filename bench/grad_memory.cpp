// bench-grad-memory: the memory a training step keeps for gradients and optimizer state, read from
// the CPU allocator, for a dense model and for the same model pruned once by global magnitude.
// The model is built, pruned, then the Reducer (a group of one), the optimizer and one training
// step are added; what the allocator still holds after the step, minus what it held before the
// Reducer, is the gradient buckets plus the optimizer's state (plus the compressor's small plan).
// One line per model and sparsity: "model sparsity bytes ratio-to-dense".
// Usage: bench-grad-memory [--models resnet18,vit] [--sparsities 0.8,0.9] [--optimizer sgd|adamw]
#include <cstdio>
#include <sstream>

#include "apps/models/registry.h"
#include "comm/reducer.h"
#include "core/allocator.h"
#include "core/ops.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "prune/pruner.h"

using namespace pac;

namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// Bytes held for gradients and optimizer state after one step at `sparsity` (0: dense).
size_t step_memory(const std::string& name, double sparsity, const std::string& optimizer) {
  models::ModelConfig config{name, name == "vit" ? 3 : 1, 10, 28, name == "resnet18"};
  auto model = models::make_model(config);
  auto group = comm::make_local_group();
  if (sparsity > 0.0) {
    prune::Pruner pruner(*model, {"magnitude", sparsity, "global", "oneshot:0", {}, 0, 0}, group);
    prune::ScoreContext context;
    pruner.step(0, context);
  }
  Generator g(0);
  Tensor x = g.randn({4, config.in_channels, 28, 28});
  Tensor y = Tensor::from_indices({0, 1, 2, 3}, {4});
  const size_t before = cpu_allocator_stats().current_bytes;
  comm::Reducer reducer(*model, group, comm::make_compressor("pactrain", {}));
  std::unique_ptr<optim::Optimizer> opt;
  if (optimizer == "adamw")
    opt = std::make_unique<optim::AdamW>(model->named_parameters(), optim::AdamWOptions{});
  else
    opt = std::make_unique<optim::Sgd>(model->named_parameters(), optim::SgdOptions{0.01f, 0.9f});
  {
    Tensor loss = cross_entropy((*model)(x), y);
    opt->zero_grad();
    loss.backward();
    reducer.finalize();
    opt->step();
  }
  return cpu_allocator_stats().current_bytes - before;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string model_list = "resnet18,vit", sparsity_list = "0.8,0.9", optimizer = "sgd";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    PAC_CHECK(i + 1 < argc, "option {} needs a value", arg);
    std::string value = argv[++i];
    if (arg == "--models")
      model_list = value;
    else if (arg == "--sparsities")
      sparsity_list = value;
    else if (arg == "--optimizer")
      optimizer = value;
    else
      PAC_FAIL("unknown option '{}'; expected --models, --sparsities or --optimizer", arg);
  }
  PAC_CHECK(optimizer == "sgd" || optimizer == "adamw",
            "--optimizer must be sgd (with momentum) or adamw, got '{}'", optimizer);
  for (const std::string& name : split(model_list)) {
    const size_t dense = step_memory(name, 0.0, optimizer);
    std::printf("%s 0 %zu 1.000\n", name.c_str(), dense);
    for (const std::string& s : split(sparsity_list)) {
      const double sparsity = std::stod(s);
      PAC_CHECK(sparsity > 0.0 && sparsity < 1.0, "--sparsities: {} is not in (0, 1)", s);
      const size_t pruned = step_memory(name, sparsity, optimizer);
      std::printf("%s %s %zu %.3f\n", name.c_str(), s.c_str(), pruned,
                  static_cast<double>(pruned) / static_cast<double>(dense));
    }
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench-grad-memory: %s\n", e.what());
  return 2;
}
