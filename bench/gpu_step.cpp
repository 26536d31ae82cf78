// bench-gpu-step: the GPU training step (forward, backward, SGD with momentum) of ResNet-50
// (224x224, batch 64) and ViT-B/16 (224x224, batch 32) on synthetic ImageNet-shaped data, and of
// GPT-2 small (gpt2-small: 50257 tokens of vocabulary, context 1024, batch 8) on random tokens,
// timed with CUDA events on the compute stream: the median of --steps steps after --warmup. One
// JSON line per model; bench/torch_gpu_step.py prints the same lines for PyTorch eager, and
// scripts/gpu_check.sh runs both. --sparsity S first masks a fraction S of every weight of two
// or more dimensions (the same random masks for a given seed), so that a pruned step can be
// timed against the dense one: the masked update and the masked gradient are what it adds.
// Usage: bench-gpu-step [--models resnet50,vit-base,gpt2-small] [--steps 30] [--warmup 10]
//                       [--tf32] [--device cuda|cpu] [--image-size 224] [--context 1024]
//                       [--batch B] [--sparsity S] [--gemm-size 8192]
// --device cpu (with a small --image-size, --context and --batch) checks the harness on a machine
// without a GPU; it times with the host clock. The model name `gemm` times pactrain's matmul of
// two --gemm-size square matrices instead (best of --steps after --warmup, in TFLOP/s): the GEMM
// goes to cuBLAS, so this checks how it is called, against bench/torch_gpu_step.py --peak.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <vector>

#include "apps/models/registry.h"
#include "core/allocator.h"
#include "core/ops.h"
#include "optim/sgd.h"

#ifdef PAC_WITH_CUDA
#include <cuda_profiler_api.h>
#include "core/cuda/check.h"
#include "core/cuda/context.h"
#endif

using namespace pac;

// Milliseconds of each of `steps` calls of step, by the host clock.
template <class Step>
std::vector<float> host_timed(Step& step, int64_t steps) {
  std::vector<float> ms;
  for (int64_t s = 0; s < steps; ++s) {
    auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(
        std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return ms;
}

// The same by CUDA events recorded between the steps on the compute stream: what the GPU took,
// not when the host returned.
template <class Step>
std::vector<float> gpu_timed(Step& step, int64_t steps) {
#ifdef PAC_WITH_CUDA
  cuda::synchronize();
  cudaStream_t stream = cuda::compute_stream();
  // Only the timed steps are profiled under `ncu --profile-from-start off` (no effect otherwise).
  CUDA_CHECK(cudaProfilerStart());
  std::vector<cudaEvent_t> events(steps + 1);
  for (auto& e : events) CUDA_CHECK(cudaEventCreate(&e));
  CUDA_CHECK(cudaEventRecord(events[0], stream));
  for (int64_t s = 0; s < steps; ++s) {
    step();
    CUDA_CHECK(cudaEventRecord(events[s + 1], stream));
  }
  cuda::synchronize();
  CUDA_CHECK(cudaProfilerStop());
  std::vector<float> ms(steps);
  for (int64_t s = 0; s < steps; ++s) {
    CUDA_CHECK(cudaEventElapsedTime(&ms[s], events[s], events[s + 1]));
  }
  for (auto& e : events) cudaEventDestroy(e);
  return ms;
#else
  (void)step;
  (void)steps;
  PAC_FAIL("this build has no CUDA backend");
#endif
}

int main(int argc, char** argv) try {
  int64_t steps = 30, warmup = 10, image_size = 224, context = 1024, batch_override = 0;
  int64_t gemm_size = 8192;
  double sparsity = 0.0;
  bool tf32 = false;
  std::string device_name = "cuda";
  std::string model_list = "resnet50,vit-base";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--tf32") {
      tf32 = true;
      continue;
    }
    PAC_CHECK(i + 1 < argc, "option {} needs a value", arg);
    std::string value = argv[++i];
    if (arg == "--steps")
      steps = std::stoll(value);
    else if (arg == "--warmup")
      warmup = std::stoll(value);
    else if (arg == "--models")
      model_list = value;
    else if (arg == "--device")
      device_name = value;
    else if (arg == "--image-size")
      image_size = std::stoll(value);
    else if (arg == "--context")
      context = std::stoll(value);
    else if (arg == "--batch")
      batch_override = std::stoll(value);
    else if (arg == "--sparsity")
      sparsity = std::stod(value);
    else if (arg == "--gemm-size")
      gemm_size = std::stoll(value);
    else
      PAC_FAIL(
          "unknown option '{}'; expected --models, --steps, --warmup, --tf32, --device, "
          "--image-size, --context, --batch, --sparsity or --gemm-size",
          arg);
  }
  PAC_CHECK(steps > 0 && warmup >= 0, "--steps must be > 0 and --warmup >= 0");
  PAC_CHECK(sparsity >= 0.0 && sparsity < 1.0, "--sparsity must be in [0, 1), got {}", sparsity);
  PAC_CHECK(gemm_size > 0, "--gemm-size must be > 0, got {}", gemm_size);
  const Device device = Device::parse(device_name);
  if (!device.is_cpu()) {
    PAC_CHECK(cuda_compiled(), "this build has no CUDA backend");
    PAC_CHECK(cuda_device_count() > 0, "no GPU is visible (--device cpu checks the harness)");
    cuda_set_device(device.index);
    cuda_set_tf32(tf32);
  }
  std::stringstream names(model_list);
  for (std::string name; std::getline(names, name, ',');) {
    if (name == "gemm") {
      Generator g(0);
      Tensor a = g.randn({gemm_size, gemm_size}).to(device);
      Tensor b = g.randn({gemm_size, gemm_size}).to(device);
      Tensor c;
      auto product = [&] { c = matmul(a, b); };
      for (int64_t s = 0; s < warmup; ++s) product();
      std::vector<float> ms =
          device.is_cpu() ? host_timed(product, steps) : gpu_timed(product, steps);
      const float best = *std::min_element(ms.begin(), ms.end());
      const double flops = 2.0 * static_cast<double>(gemm_size) * gemm_size * gemm_size;
      std::printf(
          "{\"framework\": \"pactrain\", \"model\": \"gemm\", \"size\": %ld, "
          "\"precision\": \"%s\", \"best_ms\": %.3f, \"tflops\": %.1f}\n",
          static_cast<long>(gemm_size), tf32 ? "tf32" : "fp32", best, flops / (best * 1e-3) / 1e12);
      std::fflush(stdout);
      continue;
    }
    const bool gpt = name.rfind("gpt", 0) == 0;
    models::ModelConfig config{name, 3, 1000, image_size};
    if (name.rfind("vit", 0) == 0) config.patch = 16;
    if (gpt) {
      config.vocab_size = 50257;
      config.context = context;
    }
    const int64_t batch = batch_override > 0          ? batch_override
                          : name.rfind("vit", 0) == 0 ? 32
                          : gpt                       ? 8
                                                      : 64;
    default_generator().manual_seed(0);
    auto model = models::make_model(config);
    Generator g(0);
    int64_t masked = 0;
    for (auto& [pname, p] : model->named_parameters()) {
      if (sparsity == 0.0 || p->shape().size() < 2) continue;
      Tensor mask = g.bernoulli(p->shape(), static_cast<float>(1.0 - sparsity)).to(DType::u8);
      p->set_mask(mask);
      ++masked;
    }
    model->to(device);
    optim::Sgd sgd(model->named_parameters(), {0.01f, 0.9f});
    Tensor x, y;
    if (gpt) {
      // Random tokens; the targets are the inputs shifted by one, as a language model's are.
      std::vector<int64_t> tokens(batch * (context + 1)), inputs, targets;
      for (auto& t : tokens) t = static_cast<int64_t>(g.uniform() * 50257) % 50257;
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t t = 0; t < context; ++t) {
          inputs.push_back(tokens[b * (context + 1) + t]);
          targets.push_back(tokens[b * (context + 1) + t + 1]);
        }
      }
      x = Tensor::from_indices(inputs, {batch, context}).to(device);
      y = Tensor::from_indices(targets, {batch * context}).to(device);
    } else {
      x = g.randn({batch, 3, image_size, image_size}).to(device);
      std::vector<int64_t> label_values(batch);
      for (int64_t i = 0; i < batch; ++i) label_values[i] = i % 1000;
      y = Tensor::from_indices(label_values, {batch}).to(device);
    }
    auto step = [&] {
      Tensor logits = (*model)(x);
      if (gpt) logits = reshape(logits, {batch * context, logits.size(2)});
      Tensor loss = cross_entropy(logits, y);
      sgd.zero_grad();
      loss.backward();
      sgd.step();
    };
    for (int64_t s = 0; s < warmup; ++s) step();
    std::vector<float> ms = device.is_cpu() ? host_timed(step, steps) : gpu_timed(step, steps);
    std::sort(ms.begin(), ms.end());
    std::printf(
        "{\"framework\": \"pactrain\", \"model\": \"%s\", \"batch\": %ld, \"precision\": \"%s\", "
        "\"sparsity\": %.2f, \"masked_weights\": %ld, \"median_ms\": %.3f, \"min_ms\": %.3f, "
        "\"steps\": %ld, \"peak_gpu_bytes\": %zu}\n",
        name.c_str(), static_cast<long>(batch), tf32 ? "tf32" : "fp32", sparsity,
        static_cast<long>(masked), ms[steps / 2], ms[0], static_cast<long>(steps),
        device.is_cpu() ? size_t{0} : cuda_allocator_stats().peak_bytes);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench-gpu-step: %s\n", e.what());
  return 2;
}
