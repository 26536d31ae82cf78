// bench-ops: times sgemm and conv2d forward+backward on ResNet-like shapes and prints GFLOP/s,
// one line per case as "name seconds gflops". bench/run_ops.sh runs it next to PyTorch.
// Usage: bench-ops [--threads N] [--repeat R] [--conv im2col|dnnl]
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/cpu/gemm.h"
#include "core/cpu/threads.h"
#include "core/ops.h"

using namespace pac;
using Clock = std::chrono::steady_clock;

template <class F>
static double best_seconds(int repeat, F f) {
  f();  // warm-up: allocations, OpenBLAS buffers
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

int main(int argc, char** argv) try {
  int threads = 1, repeat = 5;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    PAC_CHECK(i + 1 < argc, "option {} needs a value", arg);
    std::string value = argv[++i];
    if (arg == "--threads") {
      threads = std::stoi(value);
    } else if (arg == "--repeat") {
      repeat = std::stoi(value);
    } else if (arg == "--conv") {
      PAC_CHECK(value == "im2col" || value == "dnnl", "--conv must be im2col or dnnl, got '{}'",
                value);
      set_conv_algorithm(value == "dnnl" ? ConvAlgorithm::dnnl : ConvAlgorithm::im2col);
    } else {
      PAC_FAIL("unknown option '{}'; expected --threads, --repeat or --conv", arg);
    }
  }
  cpu::set_num_threads(threads);
  std::printf("# gemm %s threads %d\n", cpu::gemm_name(), threads);
  Generator g(0);

  for (int64_t n : {256, 512, 1024}) {
    Tensor a = g.randn({n, n}), b = g.randn({n, n});
    double s = best_seconds(repeat, [&] { matmul(a, b); });
    std::printf("sgemm_%ld %.6f %.2f\n", n, s, 2.0 * n * n * n / s * 1e-9);
  }

  struct ConvCase {
    const char* name;
    int64_t n, c, h, oc, k, stride, pad;
  };
  std::vector<ConvCase> cases = {
      {"conv_b32_c64_28_k3", 32, 64, 28, 64, 3, 1, 1},
      {"conv_b32_c128_14_k3", 32, 128, 14, 128, 3, 1, 1},
      {"conv_b32_c64_28_k3_s2", 32, 64, 28, 128, 3, 2, 1},
      {"conv_b32_c64_28_k1", 32, 64, 28, 256, 1, 1, 0},
  };
  for (const auto& c : cases) {
    Tensor x = g.randn({c.n, c.c, c.h, c.h}).requires_grad_();
    Tensor w = g.randn({c.oc, c.c, c.k, c.k}, 0.0f, 0.05f).requires_grad_();
    auto options = Conv2dOptions::square(c.stride, c.pad);
    int64_t oh = (c.h + 2 * c.pad - c.k) / c.stride + 1;
    double flops = 2.0 * c.n * c.oc * oh * oh * c.c * c.k * c.k;
    double fwd = best_seconds(repeat, [&] {
      NoGradGuard no_grad;
      conv2d(x, w, Tensor(), options);
    });
    Tensor gy = g.randn({c.n, c.oc, oh, oh});
    double both = best_seconds(repeat, [&] {
      x.set_grad(Tensor());
      w.set_grad(Tensor());
      conv2d(x, w, Tensor(), options).backward(gy);
    });
    std::printf("%s_fwd %.6f %.2f\n", c.name, fwd, flops / fwd * 1e-9);
    std::printf("%s_fwdbwd %.6f %.2f\n", c.name, both, 3.0 * flops / both * 1e-9);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench-ops: %s\n", e.what());
  return 2;
}
