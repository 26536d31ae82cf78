// The compressors that run on GPU buckets, against the same compressors on CPU buckets, in a
// group of one (where every reduction is the identity, so the pack and unpack are what is
// compared): pactrain in fp32, bf16 and fp16, its ternary coding's error-feedback
// bookkeeping, dense, fp16 and bf16, and the native paths of topk, terngrad, randomk, powersgd
// and signsgd.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "comm/compressor.h"
#include "comm/compressors/pactrain_kernels.h"
#include "comm/compressors/ternary_codec.h"
#include "comm/compressors/topk_kernels.h"
#include "comm/reducer.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "tests/gpu/compare.h"

namespace pac {
namespace {

using testing::relative_error;

struct Setup {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<comm::Reducer> reducer;
};

// Two linear layers with the same weights on either device, half of them pruned unless `pruned`
// is false, and a Reducer with tiny buckets (one parameter each).
Setup make(Device device, const std::string& compressor, const comm::CompressorOptions& options,
           bool pruned = true) {
  default_generator().manual_seed(3);
  Setup s;
  s.model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(32, 16), std::make_shared<nn::Linear>(16, 4)});
  uint64_t seed = 40;
  for (auto& [name, p] : s.model->named_parameters()) {
    if (pruned && p->shape().size() == 2)
      p->set_mask(Generator(seed++).bernoulli(p->shape(), 0.5f));
  }
  s.model->to(device);
  s.reducer = std::make_unique<comm::Reducer>(*s.model, comm::make_local_group(),
                                              comm::make_compressor(compressor, options),
                                              comm::ReducerOptions{1e-6, 1e-6});
  return s;
}

// The gradients of the two devices differ in their last bits, and a value that close to a
// 16-bit rounding boundary may round the other way: one unit in the last place of the wire type.
double wire_tolerance(const std::string& encoding) {
  if (encoding == "bf16") return 1.0 / 128;   // 8 significant bits
  if (encoding == "fp16") return 1.0 / 1024;  // 11 significant bits
  return 1e-5;
}

// One backward of the same batch on both, then the gradient each update would read.
std::vector<Tensor> step(Setup& s, int seed) {
  Tensor x = Generator(seed).randn({8, 32}).to(s.model->parameters().front()->data().device());
  s.model->zero_grad();
  sum(mul((*s.model)(x), (*s.model)(x))).backward();
  s.reducer->finalize();
  std::vector<Tensor> out;
  for (auto& p : s.model->parameters()) out.push_back(p->grad());
  return out;
}

TEST_CASE("ternary's first pass on the GPU: large weights in many blocks, the CPU's maxima") {
  // Two weights, one large enough to be split over many blocks, and clipping on and off.
  const std::vector<int64_t> begin = {0, 300000, 300500};
  const int64_t n = begin.back();
  Tensor g = Generator(7).randn({n}), residual = Generator(8).randn({n});
  g.data<float>()[123456] = 40.0f;  // one outlier, which clipping cuts
  Tensor g_gpu = g.to(Device::cuda()), r_gpu = residual.to(Device::cuda());
  Tensor begin_gpu = Tensor::from_indices(begin, {3}).to(Device::cuda());
  const int64_t chunks = comm::gpu::ternary_prepare_chunks(300000);
  CHECK(chunks > 1);
  for (float clip : {0.0f, 2.5f}) {
    CAPTURE(clip);
    std::vector<float> e(n), maxima(2);
    comm::ternary_prepare(g.data<float>(), nullptr, residual.data<float>(), e.data(), begin, clip,
                          maxima.data());
    Tensor e_gpu = Tensor::zeros({n}, DType::f32, Device::cuda());
    Tensor maxima_gpu = Tensor::zeros({2}, DType::f32, Device::cuda());
    Tensor scratch = Tensor::zeros({2 * 2 * chunks}, DType::f32, Device::cuda());
    comm::gpu::ternary_prepare(g_gpu.data<float>(), nullptr, r_gpu.data<float>(),
                               e_gpu.data<float>(), begin_gpu.data<int64_t>(), 2, chunks, clip,
                               maxima_gpu.data<float>(), scratch.data<float>());
    CHECK(e_gpu.cpu().to_vector() == e);
    std::vector<float> got = maxima_gpu.cpu().to_vector();
    for (int p = 0; p < 2; ++p) CHECK(got[p] == doctest::Approx(maxima[p]).epsilon(1e-4));
  }
}

TEST_CASE("pactrain's encode and decode on the GPU match the CPU in every plain encoding") {
  for (std::string enc : {"fp32", "bf16", "fp16"}) {
    INFO("enc=" << enc);
    Setup cpu = make(Device::cpu(), "pactrain", {{"enc", enc}});
    Setup gpu = make(Device::cuda(), "pactrain", {{"enc", enc}});
    for (int s = 0; s < 2; ++s) {
      auto a = step(cpu, s), b = step(gpu, s);
      for (size_t i = 0; i < a.size(); ++i) {
        CHECK(b[i].is_cuda());
        CHECK(relative_error(b[i], a[i]) <= wire_tolerance(enc));
      }
    }
  }
}

TEST_CASE("dense, fp16 and bf16 on GPU buckets match the CPU") {
  for (std::string name : {"dense", "fp16", "bf16"}) {
    INFO("compressor " << name);
    Setup cpu = make(Device::cpu(), name, {}), gpu = make(Device::cuda(), name, {});
    auto a = step(cpu, 5), b = step(gpu, 5);
    std::string wire = name == "dense" ? "fp32" : name;
    for (size_t i = 0; i < a.size(); ++i) CHECK(relative_error(b[i], a[i]) <= wire_tolerance(wire));
  }
}

TEST_CASE("topk's radix select on the GPU: the k largest magnitudes, ties in candidate order") {
  // Candidates at every position but each fifth, and a run of values of equal magnitude (both
  // signs) among them, so that some k cut through the ties.
  const int64_t n = 120000;
  std::vector<float> acc = Generator(11).randn({n}).to_vector();
  for (int64_t i = 50000; i < 51000; ++i) acc[i] = i % 2 ? 3.0f : -3.0f;  // 800 candidates
  std::vector<int32_t> positions;
  for (int64_t i = 0; i < n; ++i)
    if (i % 5 != 0) positions.push_back(static_cast<int32_t>(i));
  const int64_t m = static_cast<int64_t>(positions.size());
  std::vector<float> magnitudes;
  for (int32_t p : positions) magnitudes.push_back(std::fabs(acc[p]));
  std::sort(magnitudes.begin(), magnitudes.end(), std::greater<float>());
  const int64_t above = std::count_if(magnitudes.begin(), magnitudes.end(),
                                      [](float v) { return v > 3.0f; });  // about 250
  REQUIRE(above > 0);
  Tensor acc_gpu = Tensor::from_vector(acc, {n}).to(Device::cuda());
  Tensor positions_host = Tensor::empty({m}, DType::i32);
  std::copy(positions.begin(), positions.end(), positions_host.data<int32_t>());
  Tensor positions_gpu = positions_host.to(Device::cuda());
  for (int64_t k : {int64_t{1}, int64_t{37}, above, above + 5, above + 300, above + 800, m}) {
    CAPTURE(k);
    // What the select must give: above the k-th largest magnitude in candidate order, then ties.
    const float threshold = magnitudes[k - 1];
    std::vector<int32_t> expected;
    for (int32_t p : positions)
      if (std::fabs(acc[p]) > threshold) expected.push_back(p);
    for (int32_t p : positions)
      if (std::fabs(acc[p]) == threshold && static_cast<int64_t>(expected.size()) < k)
        expected.push_back(p);
    Tensor chosen = Tensor::zeros({k}, DType::i32, Device::cuda());
    Tensor scratch =
        Tensor::empty({comm::gpu::topk_select_scratch_bytes(m)}, DType::u8, Device::cuda());
    comm::gpu::topk_select(acc_gpu.data<float>(), positions_gpu.data<int32_t>(), m, k,
                           chosen.data<int32_t>(), scratch.data<uint8_t>());
    Tensor got = chosen.cpu();
    std::vector<int32_t> got_positions(got.data<int32_t>(), got.data<int32_t>() + k);
    CHECK(got_positions == expected);
  }
}

TEST_CASE(
    "topk, randomk, powersgd and signsgd on GPU buckets match the CPU, natively (randomk with "
    "the same indices)") {
  const std::vector<std::pair<std::string, comm::CompressorOptions>> cases = {
      {"topk", {{"ratio", "0.25"}}},
      {"randomk", {{"ratio", "0.25"}}},
      {"powersgd", {{"rank", "2"}, {"start_iter", "0"}}},
      {"signsgd", {}}};
  for (const auto& [name, options] : cases) {
    INFO("compressor " << name);
    // PowerSGD factors only whole matrices (a pruned weight's compact gradient goes dense).
    const bool pruned = name != "powersgd";
    Setup cpu = make(Device::cpu(), name, options, pruned),
          gpu = make(Device::cuda(), name, options, pruned);
    // Two steps, so that what each keeps between steps (residuals, momentum, Q) is compared too.
    for (int s = 0; s < 2; ++s) {
      auto a = step(cpu, 30 + s), b = step(gpu, 30 + s);
      for (size_t i = 0; i < a.size(); ++i) {
        CHECK(b[i].is_cuda());
        CHECK(relative_error(b[i], a[i]) <= 1e-3);
      }
    }
  }
}

TEST_CASE(
    "pactrain ternary on the GPU: what is received plus the new residual is the gradient "
    "plus the old residual, and the codes are multiples of the scale / levels up to the scale") {
  for (int levels : {1, 3}) {
    CAPTURE(levels);
    Setup reference = make(Device::cpu(), "pactrain", {{"enc", "fp32"}});
    Setup gpu =
        make(Device::cuda(), "pactrain",
             {{"enc", "ternary"}, {"ef", "1"}, {"clip", "0"}, {"levels", std::to_string(levels)}});
    std::map<int, std::vector<float>> residual;  // by bucket, in value order
    std::map<int, float> previous_maximum;       // by bucket: max |gradient + residual| a step ago
    for (int s = 0; s < 4; ++s) {
      auto exact = step(reference, 10 + s);
      auto coded = step(gpu, 10 + s);
      StateDict state = gpu.reducer->compressor().state();
      for (const auto& bucket : gpu.reducer->buckets()) {
        std::string key = comm::bucket_state_key(bucket.index, "residual");
        if (!state.count(key)) continue;  // a dense bucket (a bias)
        std::vector<float> now = state.at(key).to_vector();
        std::vector<float> before = residual.count(bucket.index)
                                        ? residual[bucket.index]
                                        : std::vector<float>(now.size(), 0.0f);
        // The bucket's values, in order: each entry's compact gradient (one entry per bucket here).
        std::vector<float> received, gradient;
        for (const auto& entry : bucket.entries) {
          auto params = gpu.model->parameters();
          size_t i = std::find(params.begin(), params.end(), entry.param) - params.begin();
          for (float v : coded[i].to_vector()) received.push_back(v);
          for (float v : exact[i].to_vector()) gradient.push_back(v);
        }
        REQUIRE(received.size() == now.size());
        // The scale, from the inputs alone (one parameter per bucket): ef=1 codes with the previous
        // step's max |gradient + residual| (scale=previous), the plan's first step with its own.
        float maximum = 0.0f;
        for (size_t j = 0; j < now.size(); ++j)
          maximum = std::max(maximum, std::fabs(gradient[j] + before[j]));
        const float scale =
            previous_maximum.count(bucket.index) ? previous_maximum[bucket.index] : maximum;
        previous_maximum[bucket.index] = maximum;
        REQUIRE(scale > 0.0f);
        for (size_t j = 0; j < now.size(); ++j) {
          CHECK(received[j] + now[j] == doctest::Approx(gradient[j] + before[j]).epsilon(1e-4));
          const float units = std::fabs(received[j]) / (scale / static_cast<float>(levels));
          CHECK(std::fabs(units - std::round(units)) <= 1e-3f * levels);
          CHECK(units <= levels + 1e-3f);
        }
        residual[bucket.index] = now;
      }
    }
  }
}

TEST_CASE(
    "terngrad on GPU buckets, natively: each value is 0 or the layer's scale with the gradient's "
    "sign, and the codes are unbiased") {
  Setup reference = make(Device::cpu(), "dense", {});
  Setup gpu = make(Device::cuda(), "terngrad", {{"clip", "0"}});
  auto exact = step(reference, 21);
  std::vector<std::vector<double>> mean(exact.size());
  const int draws = 200;
  for (int d = 0; d < draws; ++d) {
    auto coded = step(gpu, 21);  // the same gradient; each step flips other coins
    for (size_t i = 0; i < exact.size(); ++i) {
      CHECK(coded[i].is_cuda());
      auto g = exact[i].to_vector(), got = coded[i].to_vector();
      float scale = 0.0f;  // clip=0: the largest magnitude of the layer (one per bucket here)
      for (float v : g) scale = std::max(scale, std::fabs(v));
      mean[i].resize(g.size());
      for (size_t j = 0; j < g.size(); ++j) {
        const bool zero = got[j] == 0.0f;
        CHECK((zero || std::fabs(std::fabs(got[j]) - scale) <= 1e-5f * scale));
        CHECK((zero || (got[j] > 0.0f) == (g[j] > 0.0f)));
        mean[i][j] += got[j] / draws;
      }
    }
  }
  // Each draw's standard deviation is at most the scale: the mean of 200 is within 5 standard
  // errors of the gradient.
  for (size_t i = 0; i < exact.size(); ++i) {
    auto g = exact[i].to_vector();
    float scale = 0.0f;
    for (float v : g) scale = std::max(scale, std::fabs(v));
    for (size_t j = 0; j < g.size(); ++j)
      CHECK(std::fabs(mean[i][j] - g[j]) <= 5.0 * scale / std::sqrt(double(draws)));
  }
}

TEST_CASE("a checkpoint's compressor state, read into host memory, resumes on GPU buckets") {
  // A checkpoint is read into host tensors; every compressor must move its state to the buckets'
  // device on load, and the resumed step must equal the uninterrupted one.
  const std::vector<std::pair<std::string, comm::CompressorOptions>> compressors = {
      {"randomk", {{"ratio", "0.25"}}},
      {"signsgd", {}},
      {"topk", {{"ratio", "0.1"}}},
      {"powersgd", {{"rank", "2"}, {"start_iter", "1"}}},
      {"pactrain", {{"enc", "ternary"}}}};
  for (const auto& [name, options] : compressors) {
    CAPTURE(name);
    Setup straight = make(Device::cuda(), name, options);
    Setup resumed = make(Device::cuda(), name, options);
    for (int s = 0; s < 2; ++s) {
      step(straight, 30 + s);
      step(resumed, 30 + s);
    }
    StateDict on_host;
    for (const auto& [key, t] : resumed.reducer->compressor().state()) on_host[key] = t.cpu();
    Setup fresh = make(Device::cuda(), name, options);
    auto into = fresh.model->parameters(), from = resumed.model->parameters();
    for (size_t i = 0; i < into.size(); ++i) {
      Tensor weights = into[i]->data();
      weights.copy_(from[i]->data());
    }
    fresh.reducer->load_compressor_state(on_host);
    auto expected = step(straight, 32);
    auto got = step(fresh, 32);
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(got[i].is_cuda());
      CHECK(got[i].to_vector() == expected[i].to_vector());
    }
  }
}

}  // namespace
}  // namespace pac
