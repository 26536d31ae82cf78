#include "comm/compressors/pactrain_auto.h"

#include <algorithm>
#include <chrono>

#include "core/device.h"
#include "core/tensor.h"

namespace pac::comm {

AutoCandidate cheapest_encoding(const EncodingCosts& costs, double ternary_bytes_per_value,
                                bool ternary_waits_for_scales) {
  const double latency = costs.all_reduce_one;
  const double per_fp32 = std::max(0.0, costs.all_reduce_vector - latency);  // the bandwidth part
  const double bytes[] = {4.0, 2.0, ternary_bytes_per_value};
  AutoCandidate best = AutoCandidate::fp32;
  double best_cost = 0.0;
  for (int e = 0; e < 3; ++e) {
    double cost = latency + per_fp32 * bytes[e] / 4.0 + costs.codec[e];
    if (e == static_cast<int>(AutoCandidate::ternary) && ternary_waits_for_scales) cost += latency;
    if (e == 0 || cost < best_cost) {
      best = static_cast<AutoCandidate>(e);
      best_cost = cost;
    }
  }
  return best;
}

EncodingCosts measure_encoding_costs(int64_t values, Device device, ProcessGroup& group,
                                     const std::function<double(AutoCandidate)>& codec_seconds) {
  using Clock = std::chrono::steady_clock;
  // On the GPU the work is asynchronous: each measurement waits for the device to finish.
  auto finish = [&] {
    if (!device.is_cpu()) cuda_synchronize();
  };
  auto best_of_two = [&](const std::function<void()>& f) {
    double best = 1e30;
    for (int i = 0; i < 2; ++i) {
      finish();
      const auto start = Clock::now();
      f();
      finish();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
    return best;
  };
  Tensor probe = Tensor::zeros({values}, DType::f32, device);
  Tensor one = Tensor::zeros({1}, DType::f32, device);
  group.all_reduce(probe, ReduceOp::sum)->wait();  // warm-up
  std::vector<float> measured = {
      static_cast<float>(best_of_two([&] { group.all_reduce(probe, ReduceOp::sum)->wait(); })),
      static_cast<float>(best_of_two([&] { group.all_reduce(one, ReduceOp::sum)->wait(); }))};
  for (AutoCandidate e : {AutoCandidate::fp32, AutoCandidate::bf16, AutoCandidate::ternary}) {
    finish();
    measured.push_back(static_cast<float>(codec_seconds(e)));
  }
  Tensor shared = Tensor::from_vector(measured, {static_cast<int64_t>(measured.size())});
  group.all_reduce(shared, ReduceOp::avg)->wait();
  const std::vector<float> m = shared.to_vector();
  EncodingCosts costs;
  costs.all_reduce_vector = m[0];
  costs.all_reduce_one = m[1];
  for (size_t e = 0; e < 3; ++e) costs.codec[e] = m[2 + e];
  return costs;
}

}  // namespace pac::comm
