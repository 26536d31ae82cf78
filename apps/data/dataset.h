// Dataset: a labelled image set held in memory as bytes, [N, C, H, W] u8 images and [N] i64
// labels, with the per-channel mean and standard deviation the loader normalises with.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace pac::data {

struct Dataset {
  std::string name;
  Tensor images;  // u8 [N, C, H, W]
  Tensor labels;  // i64 [N]
  int64_t num_classes = 0;
  std::vector<float> mean, std;  // per channel, on the [0, 1] scale

  int64_t size() const { return images.defined() ? images.size(0) : 0; }
  int64_t channels() const { return images.size(1); }
  int64_t height() const { return images.size(2); }
  int64_t width() const { return images.size(3); }
};

// MNIST or Fashion-MNIST from a directory holding the four IDX files (gzipped or not).
Dataset load_mnist_like(const std::string& name, const std::string& dir, bool train);
// CIFAR-10 binary version: data_batch_1..5.bin (train) or test_batch.bin.
Dataset load_cifar10(const std::string& dir, bool train);
// The same from the files' bytes (`names` for errors): whole 3073-byte records, labels 0 to 9.
Dataset decode_cifar10(const std::vector<std::string>& names,
                       const std::vector<std::vector<uint8_t>>& contents);
// CIFAR-100 binary version: train.bin or test.bin, whose records carry a coarse label (20
// superclasses) and a fine one (100 classes): the fine labels, or with `coarse` the superclasses.
Dataset load_cifar100(const std::string& dir, bool train, bool coarse = false);
Dataset decode_cifar100(const std::vector<std::string>& names,
                        const std::vector<std::vector<uint8_t>>& contents, bool coarse = false);
// Random images with a per-class pattern (learnable, for throughput runs and tests).
Dataset make_synthetic(int64_t size, int64_t channels, int64_t image_size, int64_t num_classes,
                       uint64_t seed);

}  // namespace pac::data
