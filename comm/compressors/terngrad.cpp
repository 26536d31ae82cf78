// terngrad (Wen et al. 2017) as its paper runs it: every gradient value becomes s * t with t in
// {-1, 0, +1}, layer-wise (one scale s per parameter, shared by an all-reduce-max so that all
// ranks code with the same scales) and with the paper's gradient clipping: each rank's scale is
// at most `clip` (2.5) times the root mean square of the layer's values, so that one outlier does
// not code the rest of the layer to zero. t = sign(g) with probability min(1, |g| / s), else 0, so
// without clipping (clip=0) E[s t] = g: unbiased. The sums of t travel packed several to a 64-bit
// word (ternary_codec.h, the codec pactrain uses too): 0.38 bytes a value on 2 ranks.
#include "comm/compressors/builtin.h"
#include "comm/compressors/ternary_codec.h"
#include "core/option_reader.h"

namespace pac::comm {

namespace {

class TernGrad : public Compressor {
 public:
  TernGrad(float clip, uint64_t seed) : clip_(clip), seed_(seed) {}
  std::string name() const override { return "terngrad"; }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    // Each parameter is a segment with its own scale.
    auto begin = std::make_shared<std::vector<int64_t>>();
    for (const auto& e : bucket.entries) begin->push_back(e.offset);
    begin->push_back(bucket.flat.numel());
    Tensor flat = bucket.flat;
    Tensor scales = Tensor::zeros({static_cast<int64_t>(bucket.entries.size())});
    timed([&] {
      float* g = flat.data<float>();
      ternary_prepare(g, nullptr, nullptr, g, *begin, clip_, scales.data<float>());
    });
    group.all_reduce(scales, ReduceOp::max)->wait();  // the codes need the shared scales first
    const TernaryWire layout = ternary_wire(group.size());
    Tensor wire = Tensor::zeros({layout.elements(flat.numel())}, layout.dtype);
    keep_for_undo(steps_[bucket.index]);
    const uint64_t step = steps_[bucket.index]++;
    timed([&] {
      uint64_t seed = seed_ ^ (uint64_t(group.rank()) << 32) ^ (step * 0x9e3779b97f4a7c15ull) ^
                      (uint64_t(bucket.index) << 52);
      ternary_encode(flat.data<float>(), *begin, scales.data<float>(), seed, wire, layout, nullptr);
    });
    const int world = group.size();
    return then(group.all_reduce(wire, ReduceOp::sum),
                [this, flat, wire, scales, begin, layout, world]() mutable {
                  timed([&] {
                    ternary_decode(wire, layout, world, *begin, scales.data<float>(),
                                   flat.data<float>(), nullptr);
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
  float clip_;
  uint64_t seed_;
  std::map<int, uint64_t> steps_;
};

}  // namespace

std::unique_ptr<Compressor> make_terngrad(const CompressorOptions& options) {
  OptionReader read("--compress-opt", "terngrad", options);
  auto clip = static_cast<float>(read.number("clip", 2.5));
  auto seed = static_cast<uint64_t>(read.number("seed", 0));
  read.finish();
  PAC_CHECK(clip == 0.0f || clip >= 1.0f,
            "--compress-opt clip={} for terngrad: a layer's scale is clipped to clip x the root "
            "mean square of its values; use 0 (off) or a value >= 1 (the paper uses 2.5)",
            clip);
  return std::make_unique<TernGrad>(clip, seed);
}

}  // namespace pac::comm
