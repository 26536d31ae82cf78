#include "apps/data/loader.h"

#include "core/generator.h"

namespace pac::data {

Loader::Loader(const Dataset& dataset, const LoaderOptions& options)
    : dataset_(dataset), options_(options) {
  check_shard(options.batch, options.rank, options.world_size, dataset.size());
  PAC_CHECK(options.crop_padding >= 0, "loader: crop padding must be >= 0, got {}",
            options.crop_padding);
  set_epoch(0);
}

void check_shard(int64_t batch, int64_t rank, int64_t world_size, int64_t samples) {
  PAC_CHECK(batch > 0, "loader: batch size must be positive, got {}", batch);
  PAC_CHECK(world_size > 0 && rank >= 0 && rank < world_size,
            "loader: rank {} is not in [0, world size {})", rank, world_size);
  PAC_CHECK(samples >= world_size, "loader: {} samples cannot be shared by {} ranks", samples,
            world_size);
}

Batch empty_image_batch(int64_t count, int64_t c, int64_t h, int64_t w, bool pinned) {
  if (pinned) {
    return {Tensor::empty_pinned({count, c, h, w}), Tensor::empty_pinned({count}, DType::i64), {}};
  }
  return {Tensor::empty({count, c, h, w}), Tensor::empty({count}, DType::i64), {}};
}

Generator sample_generator(uint64_t seed, int64_t epoch, int64_t position) {
  return Generator((seed + 1) * 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(epoch) << 40) ^
                   static_cast<uint64_t>(position));
}

std::vector<int64_t> rank_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch, int64_t rank,
                                int64_t world) {
  std::vector<int64_t> all;
  if (shuffle) {
    Generator g(seed * 1000003ull + static_cast<uint64_t>(epoch));
    all = g.permutation(n);
  } else {
    all.resize(n);
    for (int64_t i = 0; i < n; ++i) all[i] = i;
  }
  std::vector<int64_t> order(n / world);
  for (size_t k = 0; k < order.size(); ++k) order[k] = all[rank + static_cast<int64_t>(k) * world];
  return order;
}

void Loader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  order_ = rank_order(dataset_.size(), options_.shuffle, options_.seed, epoch, options_.rank,
                      options_.world_size);
}

int64_t Loader::num_batches() const {
  int64_t n = samples_per_rank();
  return options_.drop_last ? n / options_.batch : (n + options_.batch - 1) / options_.batch;
}

Batch Loader::batch(int64_t index) const {
  PAC_CHECK(index >= 0 && index < num_batches(), "loader: batch {} of {} does not exist", index,
            num_batches());
  int64_t begin = index * options_.batch;
  int64_t count = std::min(options_.batch, samples_per_rank() - begin);
  int64_t c = dataset_.channels(), h = dataset_.height(), w = dataset_.width();
  Batch out = empty_image_batch(count, c, h, w, options_.pinned);
  const uint8_t* src = dataset_.images.data<uint8_t>();
  float* dst = out.inputs.data<float>();
  const int64_t pad = options_.crop_padding;
  for (int64_t b = 0; b < count; ++b) {
    int64_t sample = order_[begin + b];
    out.samples.push_back(sample);
    // A sample's augmentation depends only on (seed, epoch, its place in the epoch's order):
    // reproducible, resumable, and the same whichever rank draws it, so a global batch is the
    // same images on any number of ranks.
    Generator g =
        sample_generator(options_.seed, epoch_, options_.rank + (begin + b) * options_.world_size);
    out.targets.data<int64_t>()[b] = dataset_.labels.data<int64_t>()[sample];
    int64_t dy = pad > 0 ? static_cast<int64_t>(g.below(2 * pad + 1)) - pad : 0;
    int64_t dx = pad > 0 ? static_cast<int64_t>(g.below(2 * pad + 1)) - pad : 0;
    bool flip = options_.flip && g.uniform() < 0.5f;
    for (int64_t ch = 0; ch < c; ++ch) {
      const uint8_t* plane = src + (sample * c + ch) * h * w;
      float* out_plane = dst + (b * c + ch) * h * w;
      float scale = 1.0f / (255.0f * dataset_.std[ch]);
      float shift = dataset_.mean[ch] / dataset_.std[ch];
      float zero = -shift;  // a padded (black) pixel after normalisation
      for (int64_t y = 0; y < h; ++y) {
        int64_t sy = y + dy;
        for (int64_t x = 0; x < w; ++x) {
          int64_t sx = (flip ? w - 1 - x : x) + dx;
          bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
          out_plane[y * w + x] = inside ? plane[sy * w + sx] * scale - shift : zero;
        }
      }
    }
  }
  return out;
}

}  // namespace pac::data
