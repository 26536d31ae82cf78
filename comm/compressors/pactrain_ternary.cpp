#include "comm/compressors/pactrain_ternary.h"

#include "comm/compressors/pactrain_kernels.h"
#include "core/cuda/kernels.h"

namespace pac::comm {

namespace {
bool is_weight(const BucketEntry& e) { return e.param->shape().size() >= 2; }
}  // namespace

void allocate_ternary(PactrainPlan& plan, const Bucket& bucket, int world,
                      const TernarySettings& settings) {
  const Device device = bucket.flat.device();
  std::vector<int64_t> coded, plain;
  for (const auto& e : bucket.entries) {
    auto& into = is_weight(e) ? coded : plain;
    if (is_weight(e)) plan.entry_begin.push_back(static_cast<int64_t>(coded.size()));
    for (int64_t j = 0; j < e.numel; ++j) into.push_back(e.offset + j);
  }
  plan.entry_begin.push_back(static_cast<int64_t>(coded.size()));
  auto positions = [&](const std::vector<int64_t>& p) {
    Tensor t = Tensor::empty({static_cast<int64_t>(p.size())}, DType::i32);
    for (size_t j = 0; j < p.size(); ++j) t.data<int32_t>()[j] = static_cast<int32_t>(p[j]);
    return t.to(device);
  };
  plan.coded = positions(coded);
  plan.plain = positions(plain);
  const int64_t c = plan.coded.numel(), weights = plan.entry_begin.size() - 1;
  plan.values = Tensor::zeros({c}, DType::f32, device);
  plan.plain_values = Tensor::zeros({plan.plain.numel()}, settings.plain, device);
  plan.begin = Tensor::from_indices(plan.entry_begin, {weights + 1}).to(device);
  plan.scale = Tensor::zeros({weights}, DType::f32, device);
  if (!device.is_cpu()) {
    int64_t largest = 0;
    for (int64_t w = 0; w < weights; ++w)
      largest = std::max(largest, plan.entry_begin[w + 1] - plan.entry_begin[w]);
    plan.prepare_chunks = gpu::ternary_prepare_chunks(largest);
    plan.prepare_scratch = Tensor::zeros({2 * weights * plan.prepare_chunks}, DType::f32, device);
  }
  plan.next_scale = Tensor::zeros({weights}, DType::f32, device);
  // GPU buckets travel over NCCL, which has no 16-bit integer type.
  plan.layout = ternary_wire(world, settings.levels, /*int16=*/device.is_cpu());
  plan.wire = Tensor::zeros({plan.layout.elements(c)}, plan.layout.dtype, device);
  if (settings.error_feedback) {
    plan.residual = Tensor::zeros({c}, DType::f32, device);
    plan.next_residual = Tensor::zeros({c}, DType::f32, device);
  }
}

uint64_t ternary_coding_seed(const PactrainPlan& plan, int rank, const TernarySettings& settings) {
  return settings.seed ^ (uint64_t(rank) << 32) ^ (plan.steps * 0x9e3779b97f4a7c15ull) ^
         (uint64_t(plan.bucket) << 52);
}

void prepare_ternary(PactrainPlan& plan, const Bucket& bucket, int world,
                     const TernarySettings& settings) {
  const float* g = bucket.flat.data<float>();
  const float inv_world = 1.0f / static_cast<float>(world);
  const float* r = settings.error_feedback ? plan.residual.data<float>() : nullptr;
  // This step's maxima: the scales to code with (fresh), or the next step's (previous).
  Tensor& maxima = settings.previous_scale ? plan.next_scale : plan.scale;
  const int32_t* coded = plan.coded.data<int32_t>();
  const int32_t* plain = plan.plain.data<int32_t>();
  if (bucket.flat.is_cuda()) {
    gpu::ternary_prepare(g, coded, r, plan.values.data<float>(), plan.begin.data<int64_t>(),
                         plan.scale.numel(), plan.prepare_chunks, settings.clip,
                         maxima.data<float>(), plan.prepare_scratch.data<float>());
    gpu::gather_scaled(g, plain, plan.plain.numel(), inv_world, plan.plain_values.raw_data(),
                       plan.plain_values.dtype());
    return;
  }
  ternary_prepare(g, coded, r, plan.values.data<float>(), plan.entry_begin, settings.clip,
                  maxima.data<float>());
  const int64_t n = plan.plain.numel();
  if (plan.plain_values.dtype() == DType::bf16) {
    BFloat16* pv = plan.plain_values.data<BFloat16>();
    for (int64_t j = 0; j < n; ++j) pv[j] = float_to_bf16(g[plain[j]] * inv_world);
    return;
  }
  float* pv = plan.plain_values.data<float>();
  for (int64_t j = 0; j < n; ++j) pv[j] = g[plain[j]] * inv_world;
}

void encode_ternary(PactrainPlan& plan, int rank, const TernarySettings& settings) {
  const TernaryWire& layout = plan.layout;
  const uint64_t seed = ternary_coding_seed(plan, rank, settings);
  float* res = settings.error_feedback ? plan.next_residual.data<float>() : nullptr;
  if (plan.values.is_cuda()) {
    gpu::ternary_encode(plan.values.data<float>(), plan.scale.data<float>(),
                        plan.begin.data<int64_t>(), plan.scale.numel(), plan.values.numel(), seed,
                        res, plan.wire.raw_data(),
                        {layout.bits, layout.per_word, layout.dtype, layout.levels});
    return;
  }
  ternary_encode(plan.values.data<float>(), plan.entry_begin, plan.scale.data<float>(), seed,
                 plan.wire, layout, res);
}

void decode_ternary(PactrainPlan& plan, Bucket& bucket, int world) {
  float* v = bucket.flat.data<float>();
  const int32_t* coded = plan.coded.data<int32_t>();
  const int32_t* plain = plan.plain.data<int32_t>();
  if (bucket.flat.is_cuda()) {
    const TernaryWire& w = plan.layout;
    gpu::ternary_decode(plan.wire.raw_data(), {w.bits, w.per_word, w.dtype, w.levels}, world,
                        plan.scale.data<float>(), plan.begin.data<int64_t>(), plan.scale.numel(),
                        plan.values.numel(), v, coded);
    const Tensor pv = plan.plain_values.dtype() == DType::f32 ? plan.plain_values
                                                              : plan.plain_values.to(DType::f32);
    cuda::index_scatter(v, plain, pv.data<float>(), plan.plain.numel());
    return;
  }
  ternary_decode(plan.wire, plan.layout, world, plan.entry_begin, plan.scale.data<float>(), v,
                 coded);
  const int64_t n = plan.plain.numel();
  if (plan.plain_values.dtype() == DType::bf16) {
    const BFloat16* pv = plan.plain_values.data<BFloat16>();
    for (int64_t j = 0; j < n; ++j) v[plain[j]] = bf16_to_float(pv[j]);
    return;
  }
  const float* pv = plan.plain_values.data<float>();
  for (int64_t j = 0; j < n; ++j) v[plain[j]] = pv[j];
}

}  // namespace pac::comm
