// terngrad (Wen et al. 2017) as its paper runs it: every gradient value becomes s * t with t in
// {-1, 0, +1}, layer-wise (one scale s per parameter, shared by an all-reduce-max so that all
// ranks code with the same scales) and with the paper's gradient clipping: each rank's scale is
// at most `clip` (2.5) times the root mean square of the layer's values, so that one outlier does
// not code the rest of the layer to zero. t = sign(g) with probability min(1, |g| / s), else 0, so
// without clipping (clip=0) E[s t] = g: unbiased. The sums of t travel packed several to a 64-bit
// word (ternary_codec.h, the codec pactrain uses too): 0.38 bytes a value on 2 ranks, and
// 0.26 in the exchange that carries one rank's codes alone (packed_fields.h).
// On GPU buckets the three passes are pactrain's kernels (pactrain_kernels.h), queued on the
// compute stream, so the bucket never visits the host; their coin flips come from a counter-based
// hash instead of the CPU's generator, as pactrain's do.
#include <algorithm>

#include "comm/compressors/builtin.h"
#include "comm/compressors/pactrain_kernels.h"
#include "comm/compressors/ternary_codec.h"
#include "core/option_reader.h"

namespace pac::comm {

namespace {

class TernGrad : public Compressor {
 public:
  TernGrad(float clip, uint64_t seed) : clip_(clip), seed_(seed) {}
  std::string name() const override { return "terngrad"; }
  bool runs_on_gpu() const override { return true; }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    if (bucket.flat.is_cuda()) return reduce_on_gpu(bucket, group);
    // Each parameter is a segment with its own scale.
    auto begin = std::make_shared<std::vector<int64_t>>(segments(bucket));
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
      const uint64_t seed = coding_seed(bucket, group.rank(), step);
      ternary_encode(flat.data<float>(), *begin, scales.data<float>(), seed, wire, layout, nullptr);
    });
    const int world = group.size();
    return then(group.all_reduce_coalesced(
                    {{wire, ReduceOp::sum, nullptr, packed_sum(layout, flat.numel())}}),
                [this, flat, wire, scales, begin, layout, world]() mutable {
                  timed([&] {
                    ternary_decode(wire, layout, world, *begin, scales.data<float>(),
                                   flat.data<float>(), nullptr);
                  });
                });
  }

  // The segments moved with the mask; the step counter stays.
  void layout_changed(const Bucket& bucket) override { device_segments_.erase(bucket.index); }

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

  // Its only state, the step count, is every rank's.
  RankStateRule rank_state_rule(const std::string&) const override { return RankStateRule::shared; }

 private:
  // Where each parameter's values begin in the bucket, and one past the end.
  static std::vector<int64_t> segments(const Bucket& bucket) {
    std::vector<int64_t> begin;
    for (const auto& e : bucket.entries) begin.push_back(e.offset);
    begin.push_back(bucket.flat.numel());
    return begin;
  }

  uint64_t coding_seed(const Bucket& bucket, int rank, uint64_t step) const {
    return seed_ ^ (uint64_t(rank) << 32) ^ (step * 0x9e3779b97f4a7c15ull) ^
           (uint64_t(bucket.index) << 52);
  }

  // The same three passes as kernels on the bucket itself. The wire is packed words (never one
  // int16 per value: NCCL has no 16-bit integer type).
  // A GPU bucket's segments on the device, with the first pass's blocks per segment and their
  // scratch: built once per layout, so a step copies nothing from the host.
  struct DeviceSegments {
    Tensor begin, scratch;
    int64_t chunks = 1;
  };
  const DeviceSegments& device_segments(const Bucket& bucket) {
    DeviceSegments& d = device_segments_[bucket.index];
    if (d.begin.defined()) return d;
    const std::vector<int64_t> host_begin = segments(bucket);
    const int64_t parameters = static_cast<int64_t>(bucket.entries.size());
    int64_t largest = 0;
    for (int64_t p = 0; p < parameters; ++p)
      largest = std::max(largest, host_begin[p + 1] - host_begin[p]);
    d.chunks = gpu::ternary_prepare_chunks(largest);
    d.begin = Tensor::from_indices(host_begin, {parameters + 1}).to(bucket.flat.device());
    d.scratch = Tensor::zeros({2 * parameters * d.chunks}, DType::f32, bucket.flat.device());
    return d;
  }

  WorkPtr reduce_on_gpu(Bucket& bucket, ProcessGroup& group) {
    const Device device = bucket.flat.device();
    const int64_t parameters = static_cast<int64_t>(bucket.entries.size());
    const DeviceSegments& layout_on_device = device_segments(bucket);
    const Tensor begin = layout_on_device.begin;
    Tensor scales = Tensor::zeros({parameters}, DType::f32, device);
    const int64_t chunks = layout_on_device.chunks;
    Tensor scratch = layout_on_device.scratch;
    float* g = bucket.flat.data<float>();
    const int64_t n = bucket.flat.numel();
    timed([&] {
      gpu::ternary_prepare(g, nullptr, nullptr, g, begin.data<int64_t>(), parameters, chunks, clip_,
                           scales.data<float>(), scratch.data<float>());
    });
    // On the GPU this orders the coding after the scales' all-reduce; the host goes on.
    group.all_reduce(scales, ReduceOp::max)->wait();
    const TernaryWire layout = ternary_wire(group.size(), 1, /*int16=*/false);
    const gpu::TernaryLayout kernel_layout{layout.bits, layout.per_word, layout.dtype, 1};
    Tensor wire = Tensor::zeros({layout.elements(n)}, layout.dtype, device);
    keep_for_undo(steps_[bucket.index]);
    const uint64_t seed = coding_seed(bucket, group.rank(), steps_[bucket.index]++);
    timed([&] {
      gpu::ternary_encode(g, scales.data<float>(), begin.data<int64_t>(), parameters, n, seed,
                          nullptr, wire.raw_data(), kernel_layout);
    });
    const int world = group.size();
    // The tensors the queued kernels read are held until the decode is queued; later kernels on
    // the same stream that reuse their memory run after it.
    return then(group.all_reduce(wire, ReduceOp::sum),
                [this, g, n, wire, scales, begin, kernel_layout, parameters, world] {
                  timed([&] {
                    gpu::ternary_decode(wire.raw_data(), kernel_layout, world, scales.data<float>(),
                                        begin.data<int64_t>(), parameters, n, g, nullptr);
                  });
                });
  }

  float clip_;
  uint64_t seed_;
  std::map<int, uint64_t> steps_;
  std::map<int, DeviceSegments> device_segments_;  // by bucket index, GPU buckets only
};

}  // namespace

std::unique_ptr<Compressor> make_terngrad(const CompressorOptions& options) {
  OptionReader read("--compress-opt", "terngrad", options);
  auto clip = static_cast<float>(read.number("clip", 2.5));
  auto seed = static_cast<uint64_t>(read.integer("seed", 0));
  read.finish();
  PAC_CHECK(clip == 0.0f || clip >= 1.0f,
            "--compress-opt clip={} for terngrad: a layer's scale is clipped to clip x the root "
            "mean square of its values; use 0 (off) or a value >= 1 (the paper uses 2.5)",
            clip);
  return std::make_unique<TernGrad>(clip, seed);
}

}  // namespace pac::comm
