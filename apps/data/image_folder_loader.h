// ImageFolderLoader: batches of an image folder's files for one rank, decoded and transformed
// when asked (by the Prefetcher's workers, while the step runs). Training batches follow the
// in-memory Loader's order and sharding (rank_order, sample_generator) with torchvision's
// training transform; evaluation batches take the files in order with its evaluation transform.
// A batch is a pure function of (epoch, index): the same on any number of threads.
#pragma once

#include <atomic>
#include <mutex>

#include "apps/data/batch.h"
#include "apps/data/image_folder.h"
#include "apps/data/image_transforms.h"

namespace pac::data {

struct ImageFolderLoaderOptions {
  int64_t batch = 32;
  // Training: shuffled by (seed, epoch), RandomResizedCrop and flip, a short last batch dropped.
  // Evaluation: in order, Resize(size * 256 / 224) and CenterCrop, every file.
  bool train = true;
  uint64_t seed = 0;
  int64_t rank = 0, world_size = 1;
  int64_t image_size = 224;
  Normalisation normalisation;
  CropRange crop;
  bool pinned = false;
  // A JPEG may decode at a reduced DCT scale when the crop needs fewer pixels than it has (see
  // EncodedImage::decode); off, every image decodes whole, as Pillow does, for pixel parity.
  bool reduced_decode = true;
  // A file that cannot be decoded: an error naming it, or with this, the next file of the
  // rank's order in its place, counted.
  bool skip_corrupt = false;
};

class ImageFolderLoader : public BatchSource {
 public:
  ImageFolderLoader(std::vector<ImageFile> files, const ImageFolderLoaderOptions& options);
  void set_epoch(int64_t epoch) override;
  int64_t num_batches() const override;
  Batch batch(int64_t index) const override;

  // Files skipped as corrupt so far (with skip_corrupt), and the first one's error.
  int64_t corrupt_skipped() const { return corrupt_skipped_.load(); }
  std::string first_corrupt() const;

 private:
  // Decodes and transforms the file at `position` of this rank's order into out (3, S, S).
  void load_sample(int64_t position, float* out, int64_t& sample, int64_t& label) const;

  std::vector<ImageFile> files_;
  ImageFolderLoaderOptions options_;
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;
  mutable std::atomic<int64_t> corrupt_skipped_{0};
  mutable std::mutex corrupt_mutex_;
  mutable std::string first_corrupt_;
};

}  // namespace pac::data
