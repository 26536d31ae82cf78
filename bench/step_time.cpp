// bench-step: the time of one training step (forward, backward, SGD update) of the bundled
// models on random 28x28 data, one line per model as "name seconds_per_step". bench/run_step.sh
// runs it next to the same models in PyTorch.
// Under mpirun every rank trains its own batch and a Reducer averages the gradients (the DDP
// step), with --compress choosing the compressor.
// Usage: bench-step [--threads N] [--steps S] [--batch B] [--models a,b,c] [--compress NAME]
#include <chrono>
#include <cstdio>
#include <sstream>

#include "apps/models/registry.h"
#include "comm/reducer.h"
#include "core/autograd.h"
#include "core/cpu/threads.h"
#include "core/ops.h"
#include "optim/sgd.h"

using namespace pac;

int main(int argc, char** argv) try {
  int threads = 1;
  int64_t steps = 10, batch = 64;
  std::string model_list = "resnet20,resnet18,vit", compress = "dense";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    PAC_CHECK(i + 1 < argc, "option {} needs a value", arg);
    std::string value = argv[++i];
    if (arg == "--threads")
      threads = std::stoi(value);
    else if (arg == "--steps")
      steps = std::stoll(value);
    else if (arg == "--batch")
      batch = std::stoll(value);
    else if (arg == "--models")
      model_list = value;
    else if (arg == "--compress")
      compress = value;
    else
      PAC_FAIL("unknown option '{}'; expected --threads, --steps, --batch, --models or --compress",
               arg);
  }
  cpu::set_num_threads(threads);
  comm::ProcessGroupPtr group = comm::make_process_group("auto");
  std::stringstream names(model_list);
  for (std::string name; std::getline(names, name, ',');) {
    // ResNets see 1-channel images (Fashion-MNIST); the ViT 3 channels, patch 4, 4.77M parameters.
    models::ModelConfig config{name, name == "vit" ? 3 : 1, 10, 28, name == "resnet18"};
    auto model = models::make_model(config);
    optim::Sgd sgd(model->named_parameters(), {0.01f, 0.9f});
    std::unique_ptr<comm::Reducer> reducer;
    if (group->size() > 1) {
      reducer = std::make_unique<comm::Reducer>(*model, group, comm::make_compressor(compress, {}));
    }
    Generator g(0);
    Tensor x = g.randn({batch, config.in_channels, 28, 28});
    Tensor y = Tensor::empty({batch}, DType::i64);
    for (int64_t i = 0; i < batch; ++i) y.data<int64_t>()[i] = i % 10;
    auto step = [&] {
      Tensor loss = cross_entropy((*model)(x), y);
      sgd.zero_grad();
      loss.backward();
      if (reducer) reducer->finalize();
      sgd.step();
    };
    step();  // warm-up: primitive creation, allocator cache
    step();
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps; ++s) step();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (group->rank() == 0) std::printf("%s %.5f\n", name.c_str(), seconds / steps);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench-step: %s\n", e.what());
  return 2;
}
