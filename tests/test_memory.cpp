// Memory: the allocators' counts by purpose, the release of what one-off phases leave in the
// cache, what an op saves for backward, the pruning selection that ranks scores without copying
// them, and a pruned run that holds less at its peak than the dense one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "apps/trainer.h"
#include "comm/reducer.h"
#include "core/allocator.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "layers/simple_layers.h"
#include "prune/selection.h"

using namespace pac;

TEST_CASE("allocations are counted under the tag of their thread's scope until freed") {
  cpu_empty_cache();
  const AllocatorStats start = cpu_allocator_stats();
  const auto weights = static_cast<int>(MemoryTag::weights);
  const auto pruning = static_cast<int>(MemoryTag::pruning);
  {
    MemoryTagScope tag(MemoryTag::weights);
    Tensor w = Tensor::empty({1 << 18});  // 1 MiB
    {
      MemoryTagScope inner(MemoryTag::pruning);
      Tensor scores = Tensor::empty({1 << 17});
      CHECK(current_memory_tag() == MemoryTag::pruning);
      const AllocatorStats during = cpu_allocator_stats();
      CHECK(during.tag_bytes[pruning] - start.tag_bytes[pruning] == (1u << 19));
    }
    CHECK(current_memory_tag() == MemoryTag::weights);
    const AllocatorStats after = cpu_allocator_stats();
    CHECK(after.tag_bytes[weights] - start.tag_bytes[weights] == (1u << 20));
    CHECK(after.tag_bytes[pruning] == start.tag_bytes[pruning]);  // freed under its own tag
    CHECK(after.tag_peak_bytes[pruning] >= start.tag_bytes[pruning] + (1u << 19));
  }
  CHECK(current_memory_tag() == MemoryTag::other);
  CHECK(cpu_allocator_stats().tag_bytes[weights] == start.tag_bytes[weights]);
}

TEST_CASE("the held peak and what each tag held at that moment") {
  cpu_empty_cache();
  cpu_reset_peak_stats();
  const AllocatorStats start = cpu_allocator_stats();
  const auto activations = static_cast<int>(MemoryTag::activations);
  {
    MemoryTagScope tag(MemoryTag::activations);
    Tensor a = Tensor::empty({1 << 20});  // 4 MiB
    Tensor b = Tensor::empty({1 << 19});  // 2 MiB
  }
  // Both freed and cached: a new size class is held on top of them.
  Tensor c = Tensor::empty({3 << 18});
  const AllocatorStats s = cpu_allocator_stats();
  CHECK(s.held_peak_bytes - (start.current_bytes + start.cached_bytes) >= (6u << 20) + (3u << 20));
  CHECK(s.cached_bytes_at_peak - start.cached_bytes >= (6u << 20));
  CHECK(s.tag_bytes_at_peak[activations] == start.tag_bytes[activations]);
  CHECK(s.tag_peak_bytes[activations] - start.tag_bytes[activations] >= (6u << 20));
}

TEST_CASE("a cached block idle for a whole cycle goes back to the system; one reused stays") {
  cpu_empty_cache();
  auto cycle = [](bool use_once_more) {
    if (use_once_more) Tensor again = Tensor::empty({1 << 18});
    cpu_release_idle_blocks();
  };
  { Tensor block = Tensor::empty({1 << 18}); }  // freed: 1 MiB cached
  const size_t cached = cpu_allocator_stats().cached_bytes;
  CHECK(cached >= (1u << 20));
  cycle(false);  // freed in this cycle: the next may take it
  CHECK(cpu_allocator_stats().cached_bytes == cached);
  for (int i = 0; i < 4; ++i) {
    cycle(true);  // taken and freed again every cycle, as a training step's buffers are
    CHECK(cpu_allocator_stats().cached_bytes == cached);
  }
  cycle(false);  // a whole cycle without a taker
  CHECK(cpu_allocator_stats().cached_bytes == 0);
}

namespace {

// The ranking as it was before selection stopped copying: all scores in one array, pruned units
// at -inf, a full sort of indices with ties to the earlier position.
std::vector<uint8_t> reference_keep(const std::vector<double>& all, int64_t k) {
  std::vector<int64_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return all[a] > all[b]; });
  std::vector<uint8_t> keep(all.size(), 0);
  for (int64_t j = 0; j < std::min<int64_t>(k, static_cast<int64_t>(all.size())); ++j)
    keep[order[j]] = 1;
  return keep;
}

}  // namespace

TEST_CASE("a unary op keeps only what its derivative reads: relu's input is freed after forward") {
  // x -> h = 2x -> y = relu(h): the scaling saves nothing, and relu's rule reads y, so once
  // forward drops h only x and y are live. Kept beside y, h would add its 1 MiB.
  constexpr int64_t n = 1 << 18;  // 1 MiB of f32
  Generator gen(3);
  Tensor x = gen.randn({n}).requires_grad_();
  cpu_empty_cache();
  const size_t before = cpu_allocator_stats().current_bytes;
  Tensor y;
  {
    Tensor h = mul_scalar(x, 2.0f);
    y = relu(h);
  }
  CHECK(cpu_allocator_stats().current_bytes - before == static_cast<size_t>(n) * 4);
  sum(y).backward();
  const std::vector<float> xs = x.to_vector(), grad = x.grad().to_vector();
  for (int64_t i = 0; i < n; ++i) REQUIRE(grad[i] == (xs[i] > 0.0f ? 2.0f : 0.0f));
}

TEST_CASE("a rule that reads the input still finds it after the op before it is gone") {
  // gelu reads x, exp reads y: each gets the one it saved, not a stand-in of the other.
  Tensor x = Tensor::from_vector({-1.5f, -0.25f, 0.5f, 2.0f}, {4}).requires_grad_();
  Tensor y;
  { y = add(gelu(mul_scalar(x, 1.0f), GeluApproximation::none), exp(mul_scalar(x, 1.0f))); }
  sum(y).backward();
  const std::vector<float> xs = x.to_vector(), grad = x.grad().to_vector();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    const double cdf = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    CHECK(grad[i] == doctest::Approx(cdf + v * pdf + std::exp(v)).epsilon(1e-5));
  }
}

TEST_CASE("radix selection keeps what a full sort of the concatenated scores keeps") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 40; ++trial) {
    INFO("trial " << trial);
    // Three tensors: f32, f64 and f32, with ties, zeros of both signs, negative scores and pruned
    // units.
    std::vector<float> a(1 + rng() % 300), c(1 + rng() % 50);
    std::vector<double> b(1 + rng() % 200);
    std::vector<uint8_t> alive_a(a.size()), alive_c(c.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = trial % 3 == 0 ? std::round(normal(rng) * 2.0f) : normal(rng);
      if (i % 17 == 0) a[i] = (i % 2) ? -0.0f : 0.0f;
      alive_a[i] = rng() % 5 != 0;
    }
    for (auto& v : b) v = trial % 3 == 0 ? std::round(normal(rng) * 2.0) : normal(rng) * 1e-30;
    for (size_t i = 0; i < c.size(); ++i) {
      c[i] = std::abs(normal(rng));
      alive_c[i] = rng() % 3 != 0;
    }
    std::vector<prune::ScoreSpan> spans{
        {a.data(), nullptr, static_cast<int64_t>(a.size()), alive_a.data()},
        {nullptr, b.data(), static_cast<int64_t>(b.size()), nullptr},
        {c.data(), nullptr, static_cast<int64_t>(c.size()), trial % 2 ? alive_c.data() : nullptr}};
    std::vector<double> all;
    for (const auto& s : spans) {
      for (int64_t u = 0; u < s.count; ++u) all.push_back(s.at(u));
    }
    for (int64_t k : {int64_t{0}, int64_t{1}, static_cast<int64_t>(all.size() / 3),
                      static_cast<int64_t>(all.size() - 1), static_cast<int64_t>(all.size())}) {
      INFO("k " << k);
      std::vector<uint8_t> ka(a.size()), kb(b.size()), kc(c.size());
      prune::keep_top(spans, k, {ka.data(), kb.data(), kc.data()});
      std::vector<uint8_t> got(ka);
      got.insert(got.end(), kb.begin(), kb.end());
      got.insert(got.end(), kc.begin(), kc.end());
      CHECK(got == reference_keep(all, k));
      if (k >= 1) {
        std::vector<double> sorted(all);
        std::sort(sorted.begin(), sorted.end(), std::greater<double>());
        CHECK(prune::kth_largest(spans, k) == sorted[k - 1]);
      }
    }
  }
}

namespace {

// A 2-step run of ResNet-20 on 28x28 images, batch 32, from an empty cache: what the CPU
// allocator held at its peak, and the most its masks and kept indices held.
struct PeakRun {
  size_t held_peak = 0;
  size_t masks = 0;
};

PeakRun two_steps(bool pruned) {
  TrainOptions o;
  o.model = {"resnet20", 1, 10, 28};
  o.data = "synthetic";
  o.synthetic_size = 128;  // and 32 test images: one evaluation batch
  o.batch = 32;
  o.epochs = 1;
  o.max_steps = 2;
  o.threads = 1;
  o.quiet = true;
  o.seed = 3;
  o.compress = "pactrain";
  if (pruned) {
    o.prune = "magnitude";
    o.sparsity = 0.8;
    o.prune_scope = "global";
  }
  cpu_empty_cache();
  cpu_reset_peak_stats();
  const AllocatorStats start = cpu_allocator_stats();
  train(o);
  const AllocatorStats end = cpu_allocator_stats();
  PeakRun run;
  run.held_peak = end.held_peak_bytes - (start.current_bytes + start.cached_bytes);
  run.masks = end.tag_peak_bytes[static_cast<int>(MemoryTag::masks)] -
              start.tag_bytes[static_cast<int>(MemoryTag::masks)];
  return run;
}

}  // namespace

TEST_CASE("a pruned run holds less at its peak than the dense one, by what pruning removes") {
  const PeakRun dense = two_steps(false);
  const PeakRun pruned = two_steps(true);
  // What 80% pruning removes: 80% of the prunable weights' gradient and momentum (f32 each).
  // The prunable weights are those with two or more dimensions.
  int64_t prunable = 0;
  nn::ModulePtr model = models::make_model({"resnet20", 1, 10, 28});  // as two_steps trains it
  for (const auto& [name, p] : model->named_parameters())
    if (p->shape().size() >= 2) prunable += p->numel();
  const double removed = 0.8 * static_cast<double>(prunable) * 4.0 * 2.0;
  INFO("dense peak " << dense.held_peak << ", pruned peak " << pruned.held_peak << ", removed "
                     << removed << ", masks " << pruned.masks);
  CHECK(pruned.masks > 0);
  // Nothing else may be added: at most a tenth of the saving goes to the allocator's size
  // classes, which round the compact buffers differently from the dense ones.
  CHECK(static_cast<double>(dense.held_peak) - static_cast<double>(pruned.held_peak) >=
        0.9 * (removed - static_cast<double>(pruned.masks)));
}

TEST_CASE("a compressor's memory stays flat over 40 mask changes: the old layouts' state goes") {
  // Each mask change re-lays out the buckets; what a compressor kept for the old layout (its
  // residuals, and the copies it keeps to undo a skipped step) must be freed with it.
  const std::vector<std::pair<std::string, comm::CompressorOptions>> compressors = {
      {"topk", {{"ratio", "0.1"}}},
      {"signsgd", {}},
      {"randomk", {{"ratio", "0.25"}}},
      {"powersgd", {{"rank", "2"}, {"start_iter", "1"}}},
      {"pactrain", {{"enc", "ternary"}}}};
  for (const auto& [name, options] : compressors) {
    CAPTURE(name);
    default_generator().manual_seed(5);
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Linear>(64, 64), std::make_shared<nn::Tanh>(),
        std::make_shared<nn::Linear>(64, 10)});
    comm::Reducer reducer(*model, comm::make_local_group(), comm::make_compressor(name, options),
                          {0.004, 0.004});
    Tensor x = Generator(1).randn({8, 64});
    Tensor y = Tensor::from_indices({0, 1, 2, 3, 4, 5, 6, 7}, {8});
    size_t after_warmup = 0;
    for (int event = 0; event < 40; ++event) {
      uint64_t seed = 100 + event;  // a new mask for every weight, as a pruning event makes
      for (auto& [pname, p] : model->named_parameters())
        if (p->shape().size() == 2) p->set_mask(Generator(seed++).bernoulli(p->shape(), 0.5f));
      model->zero_grad();
      cross_entropy((*model)(x), y).backward();
      reducer.finalize();
      if (event == 4) after_warmup = cpu_allocator_stats().current_bytes;
    }
    // A mask keeps about half of every weight, so the layouts differ a little in size: a leak of
    // one residual and its copy per event would add about 40 x 2 x 17 kB.
    CHECK(cpu_allocator_stats().current_bytes <= after_warmup + 64 * 1024);
  }
}
