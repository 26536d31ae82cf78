// fp16 and bf16: scale by 1/world, cast to 16 bits, all-reduce (sum), cast back: half the bytes
// of dense. Dividing before the sum keeps fp16 from overflowing, as PyTorch's fp16_compress_hook.
#include "comm/compressors/builtin.h"
#include "core/ops.h"

namespace pac::comm {

namespace {

class HalfPrecision : public Compressor {
 public:
  explicit HalfPrecision(DType wire) : wire_(wire) {}
  std::string name() const override { return wire_ == DType::f16 ? "fp16" : "bf16"; }
  bool runs_on_gpu() const override { return true; }
  double wire_bytes_per_value(const nn::Parameter&, int) const override { return 2.0; }
  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    Tensor flat = bucket.flat;
    Tensor wire;
    float scale = 1.0f / static_cast<float>(group.size());
    if (flat.is_cuda()) {
      // On the GPU the scale and the casts are queued kernels; the time is the GPU's.
      kernels_ += 2;
      wire = mul_scalar(flat, scale).to(wire_);
      return then(group.all_reduce(wire, ReduceOp::sum),
                  [flat, wire]() mutable { flat.copy_(wire.to(DType::f32)); });
    }
    timed([&] {
      wire = Tensor::empty(flat.shape(), wire_);
      const float* src = flat.data<float>();
      int64_t n = flat.numel();
      if (wire_ == DType::f16) {
        Half* dst = wire.data<Half>();
        for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i] * scale);
      } else {
        BFloat16* dst = wire.data<BFloat16>();
        for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i] * scale);
      }
    });
    return then(all_reduce_with_riders(bucket, group, {{wire, ReduceOp::sum}}),
                [this, flat, wire]() mutable {
                  timed([&] {
                    float* dst = flat.data<float>();
                    int64_t n = flat.numel();
                    if (wire_ == DType::f16) {
                      const Half* src = wire.data<Half>();
                      for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
                    } else {
                      const BFloat16* src = wire.data<BFloat16>();
                      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
                    }
                  });
                });
  }

 private:
  DType wire_;
};

}  // namespace

std::unique_ptr<Compressor> make_fp16(const CompressorOptions& options) {
  check_no_options("fp16", options);
  return std::make_unique<HalfPrecision>(DType::f16);
}

std::unique_ptr<Compressor> make_bf16(const CompressorOptions& options) {
  check_no_options("bf16", options);
  return std::make_unique<HalfPrecision>(DType::bf16);
}

}  // namespace pac::comm
