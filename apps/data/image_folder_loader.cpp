#include "apps/data/image_folder_loader.h"

#include "apps/data/loader.h"
#include "apps/file_io.h"
#include "core/error.h"

namespace pac::data {

namespace {

// A file larger than this is not an image a model trains on; reading it would only fill memory.
constexpr uint64_t kMaxImageBytes = uint64_t{1} << 28;

}  // namespace

ImageFolderLoader::ImageFolderLoader(std::vector<ImageFile> files,
                                     const ImageFolderLoaderOptions& options)
    : files_(std::move(files)), options_(options) {
  check_shard(options.batch, options.rank, options.world_size, static_cast<int64_t>(files_.size()));
  PAC_CHECK(options.image_size >= 8 && options.image_size <= 4096,
            "--image-size {} is not in [8, 4096]", options.image_size);
  for (int c = 0; c < 3; ++c) {
    PAC_CHECK(options.normalisation.std[c] > 0.0f, "--normalize-std: {} is not positive",
              options.normalisation.std[c]);
  }
  set_epoch(0);
}

void ImageFolderLoader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  order_ = rank_order(static_cast<int64_t>(files_.size()), options_.train, options_.seed, epoch,
                      options_.rank, options_.world_size);
}

int64_t ImageFolderLoader::num_batches() const {
  const int64_t n = static_cast<int64_t>(order_.size());
  return options_.train ? n / options_.batch : (n + options_.batch - 1) / options_.batch;
}

std::string ImageFolderLoader::first_corrupt() const {
  std::lock_guard<std::mutex> lock(corrupt_mutex_);
  return first_corrupt_;
}

void ImageFolderLoader::load_sample(int64_t position, float* out, int64_t& sample,
                                    int64_t& label) const {
  const int64_t size = options_.image_size;
  const int64_t n = static_cast<int64_t>(order_.size());
  for (int64_t attempt = 0;; ++attempt) {
    const int64_t at = (position + attempt) % n;
    const ImageFile& file = files_[static_cast<size_t>(order_[static_cast<size_t>(at)])];
    try {
      EncodedImage encoded(read_file_bytes(file.path, kMaxImageBytes), file.path);
      ResizeWindow window;
      bool flip = false;
      if (options_.train) {
        // Drawn from the sample's place in the epoch's global order, never the rank's or the
        // file's: the same global batch on any number of ranks. The draws use the full size, so
        // a reduced-scale decode changes pixels, never the crop.
        Generator g =
            sample_generator(options_.seed, epoch_, options_.rank + position * options_.world_size);
        window = random_resized_crop(encoded.width(), encoded.height(), g, options_.crop);
        flip = g.uniform() < 0.5f;
      } else {
        window = resize_center_crop(encoded.width(), encoded.height(), size * 256 / 224, size);
      }
      const RgbImage image =
          encoded.decode(options_.reduced_decode ? needed_scale(window, size) : 1.0);
      resize_normalise(image, scale_window(window, encoded.width(), encoded.height(), image), size,
                       flip, options_.normalisation, out);
      sample = order_[static_cast<size_t>(at)];
      label = file.label;
      return;
    } catch (const std::exception& e) {
      if (!options_.skip_corrupt) throw;
      if (corrupt_skipped_++ == 0) {
        std::lock_guard<std::mutex> lock(corrupt_mutex_);
        first_corrupt_ = e.what();
      }
      PAC_CHECK(attempt + 1 < std::min<int64_t>(n, 16),
                "--skip-corrupt-images: {} files in a row cannot be read; the last: {}",
                attempt + 1, e.what());
    }
  }
}

Batch ImageFolderLoader::batch(int64_t index) const {
  PAC_CHECK(index >= 0 && index < num_batches(), "loader: batch {} of {} does not exist", index,
            num_batches());
  const int64_t begin = index * options_.batch;
  const int64_t count = std::min(options_.batch, static_cast<int64_t>(order_.size()) - begin);
  const int64_t s = options_.image_size;
  Batch out = empty_image_batch(count, 3, s, s, options_.pinned);
  out.samples.resize(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    load_sample(begin + b, out.inputs.data<float>() + b * 3 * s * s, out.samples[b],
                out.targets.data<int64_t>()[b]);
  }
  return out;
}

}  // namespace pac::data
