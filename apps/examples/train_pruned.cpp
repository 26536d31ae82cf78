// A data-parallel, pruned training loop written directly against the C++ API, without the
// `pactrain` app: the template to copy when trying a new idea. It builds a small CNN, a Pruner
// (gradual magnitude pruning to 80%), a Reducer with the PacTrain compressor, and SGD, and trains
// on synthetic 28x28 images. Run it alone or under `mpirun -np 2`; it exits non-zero if the loss
// did not go down.
//   build/example-train-pruned [STEPS]
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "apps/data/loader.h"
#include "comm/reducer.h"
#include "core/generator.h"
#include "core/ops.h"
#include "layers/batch_norm.h"
#include "layers/conv2d.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "layers/simple_layers.h"
#include "optim/sgd.h"
#include "prune/pruner.h"

using namespace pac;

int main(int argc, char** argv) {
  try {
    const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 60;
    // "auto": MPI under mpirun, a single local process otherwise.
    comm::ProcessGroupPtr group = comm::make_process_group("auto");
    default_generator().manual_seed(1);  // the Reducer broadcasts rank 0's weights anyway

    // [N, 1, 28, 28] -> [N, 10]
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Conv2d>(1, 16, 3, 1, 1, false), std::make_shared<nn::BatchNorm2d>(16),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2, 2),
        std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1, false), std::make_shared<nn::BatchNorm2d>(32),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::AdaptiveAvgPool2d>(1, 1),
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(32, 10)});

    // Gradients become views into buckets; full buckets are all-reduced during backward.
    comm::Reducer reducer(*model, group, comm::make_compressor("pactrain", {{"enc", "fp32"}}));
    prune::PrunerOptions prune_options;
    prune_options.criterion = "magnitude";
    prune_options.sparsity = 0.8;
    prune_options.schedule = "gradual:0:" + std::to_string(steps / 2) + ":5";
    prune::Pruner pruner(*model, prune_options, group);
    optim::Sgd sgd(model->named_parameters(), {0.05f, 0.9f});

    // Each rank reads its own shard of every batch of 32.
    data::Dataset train = data::make_synthetic(2048, 1, 28, 10, 7);
    data::Loader loader(train, {32, true, 0, group->rank(), group->size(), true});
    double first_loss = 0.0, last_loss = 0.0;
    for (int64_t step = 0; step < steps; ++step) {
      data::Batch batch = loader.batch(step % loader.num_batches());
      prune::ScoreContext context;  // magnitude needs no gradient pass
      pruner.step(step, context);   // may shrink the masks (same on every rank)

      Tensor loss = cross_entropy((*model)(batch.inputs), batch.targets);
      sgd.zero_grad();
      loss.backward();  // launches the buckets' all-reduces
      // Waits for them; says (the same on every rank) whether any rank's step was not finite.
      comm::ReducerStepStats stats = reducer.finalize(std::isfinite(loss.item()));
      PAC_CHECK(!stats.nonfinite, "step {}: rank {}'s gradient or loss is not finite", step,
                stats.nonfinite_rank);
      pruner.observe();
      sgd.step();  // reads each pruned parameter's compact averaged gradient

      if (step < 5) first_loss += loss.item() / 5;
      if (step >= steps - 5) last_loss += loss.item() / 5;
      if (group->rank() == 0 && (step % 10 == 0 || step == steps - 1)) {
        std::printf("step %3ld  loss %.4f  density %.3f  bytes sent %lu\n", static_cast<long>(step),
                    loss.item(), 1.0 - pruner.sparsity(),
                    static_cast<unsigned long>(stats.bytes_sent));
      }
    }
    if (group->rank() == 0) {
      std::printf("mean loss of the first 5 steps %.4f, of the last 5 %.4f\n", first_loss,
                  last_loss);
    }
    return last_loss < 0.8 * first_loss ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example-train-pruned: %s\n", e.what());
    return 1;
  }
}
