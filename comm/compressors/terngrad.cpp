// terngrad (Wen et al. 2017): every gradient value becomes s * t with t in {-1, 0, +1}, where s is
// the bucket's largest magnitude (shared by an all-reduce-max so that all ranks code with the same
// scale) and t = sign(g) with probability |g| / s, else 0. E[s t] = g: unbiased. The t values are
// summed as 8-bit integers (32-bit beyond 127 ranks), a quarter of dense's bytes.
#include <cmath>

#include "comm/compressors/builtin.h"
#include "comm/compressors/options.h"
#include "core/generator.h"

namespace pac::comm {

namespace {

class TernGrad : public Compressor {
 public:
  explicit TernGrad(uint64_t seed) : seed_(seed) {}
  std::string name() const override { return "terngrad"; }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    Tensor flat = bucket.flat;
    int64_t n = flat.numel();
    Tensor scale = Tensor::zeros({1});
    timed([&] {
      float m = 0.0f;
      const float* g = flat.data<float>();
      for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(g[i]));
      scale.data<float>()[0] = m;
    });
    group.all_reduce(scale, ReduceOp::max)->wait();  // the code needs the shared scale first
    float s = scale.data<float>()[0];
    DType wire = group.size() <= 127 ? DType::i8 : DType::i32;
    Tensor ternary = Tensor::zeros({n}, wire);
    keep_for_undo(steps_[bucket.index]);
    timed([&] {
      if (s == 0.0f) return;
      uint64_t step = steps_[bucket.index]++;
      Generator gen(seed_ ^ (uint64_t(group.rank()) << 32) ^ (step * 0x9e3779b97f4a7c15ull) ^
                    (uint64_t(bucket.index) << 52));
      const float* g = flat.data<float>();
      for (int64_t i = 0; i < n; ++i) {
        int t = gen.uniform() < std::abs(g[i]) / s ? (g[i] > 0 ? 1 : -1) : 0;
        if (wire == DType::i8)
          ternary.data<int8_t>()[i] = static_cast<int8_t>(t);
        else
          ternary.data<int32_t>()[i] = t;
      }
    });
    int world = group.size();
    return then(
        group.all_reduce(ternary, ReduceOp::sum), [this, flat, ternary, s, world, wire]() mutable {
          timed([&] {
            float* out = flat.data<float>();
            float unit = s / static_cast<float>(world);
            for (int64_t i = 0, n = flat.numel(); i < n; ++i) {
              int t = wire == DType::i8 ? ternary.data<int8_t>()[i] : ternary.data<int32_t>()[i];
              out[i] = unit * static_cast<float>(t);
            }
          });
        });
  }

  StateDict state() const override {
    StateDict out;
    save_per_bucket(out, "steps", steps_);
    return out;
  }

  void load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                  ProcessGroup&) override {
    StateReader read("compressor terngrad", state);
    load_per_bucket(read, "steps", buckets, steps_);
    read.finish();
  }

 private:
  uint64_t seed_;
  std::map<int, uint64_t> steps_;
};

}  // namespace

std::unique_ptr<Compressor> make_terngrad(const CompressorOptions& options) {
  OptionReader read("terngrad", options);
  auto seed = static_cast<uint64_t>(read.number("seed", 0));
  read.finish();
  return std::make_unique<TernGrad>(seed);
}

}  // namespace pac::comm
