#include <filesystem>
#include <fstream>

#include "apps/data/dataset.h"
#include "apps/data/idx.h"
#include "apps/file_io.h"
#include "core/generator.h"

namespace pac::data {

namespace fs = std::filesystem;

namespace {

// "<stem>" or "<stem>.gz", whichever exists in dir.
std::string find_file(const std::string& dir, const std::string& stem, const std::string& name) {
  for (const std::string& candidate : {stem, stem + ".gz"}) {
    fs::path path = fs::path(dir) / candidate;
    if (fs::exists(path)) return path.string();
  }
  PAC_FAIL("{}: no {} or {}.gz in '{}' (set --data-dir to the folder that holds the {} files)",
           name, stem, stem, dir, name);
}

}  // namespace

Dataset load_mnist_like(const std::string& name, const std::string& dir, bool train) {
  std::string prefix = train ? "train" : "t10k";
  std::string image_path = find_file(dir, prefix + "-images-idx3-ubyte", name);
  std::string label_path = find_file(dir, prefix + "-labels-idx1-ubyte", name);
  Tensor images = read_idx(image_path);
  Tensor labels = read_idx(label_path);
  PAC_CHECK(images.dim() == 3, "{}: images must have 3 dimensions [N, H, W], the file has {}",
            image_path, shape_str(images.shape()));
  PAC_CHECK(labels.dim() == 1, "{}: labels must have 1 dimension [N], the file has {}", label_path,
            shape_str(labels.shape()));
  PAC_CHECK(labels.size(0) == images.size(0), "{}: {} labels for {} images in {}", label_path,
            labels.size(0), images.size(0), image_path);
  Dataset d;
  d.name = name;
  d.images = images.view_flat(0, {images.size(0), 1, images.size(1), images.size(2)});
  d.labels = labels.to(DType::i64);
  d.num_classes = 10;
  for (float v : d.labels.to_vector()) {
    PAC_CHECK(v >= 0 && v < 10, "{}: label {} outside [0, 10)", label_path, v);
  }
  bool fashion = name == "fashion-mnist";
  d.mean = {fashion ? 0.2860f : 0.1307f};
  d.std = {fashion ? 0.3530f : 0.3081f};
  return d;
}

namespace {

// A CIFAR binary file's records: label bytes, then 3x32x32 pixels.
struct CifarLayout {
  const char* name;     // "cifar10"
  int64_t label_bytes;  // 1 (CIFAR-10) or 2 (CIFAR-100: coarse, fine)
  int64_t label_at;     // which of them is the label
  int64_t classes;
  std::vector<float> mean, std;
};

CifarLayout cifar10_layout() {
  return {"cifar10", 1, 0, 10, {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};
}

CifarLayout cifar100_layout(bool coarse) {
  return {"cifar100",
          2,
          coarse ? 0 : 1,
          coarse ? 20 : 100,
          {0.5071f, 0.4865f, 0.4409f},
          {0.2673f, 0.2564f, 0.2762f}};
}

Dataset decode_cifar(const std::vector<std::string>& names,
                     const std::vector<std::vector<uint8_t>>& contents, const CifarLayout& l) {
  const int64_t pixels = 3 * 32 * 32, record = l.label_bytes + pixels;
  PAC_CHECK(names.size() == contents.size(), "{}: {} names for {} files", l.name, names.size(),
            contents.size());
  int64_t total = 0;
  for (size_t f = 0; f < contents.size(); ++f) {
    const auto& bytes = contents[f];
    PAC_CHECK(!bytes.empty() && bytes.size() % record == 0,
              "{}: size {} bytes is not a whole number of {}-byte records ({} label byte{}, then "
              "3x32x32 pixels)",
              names[f], bytes.size(), record, l.label_bytes, l.label_bytes > 1 ? "s" : "");
    for (size_t at = 0; at < bytes.size(); at += record) {
      const uint8_t label = bytes[at + l.label_at];
      PAC_CHECK(label < l.classes, "{}: record {} has label {}, expected 0 to {} (byte {})",
                names[f], at / record, label, l.classes - 1, at + l.label_at);
    }
    total += static_cast<int64_t>(bytes.size()) / record;
  }
  Dataset d;
  d.name = l.name;
  d.images = Tensor::empty({total, 3, 32, 32}, DType::u8);
  d.labels = Tensor::empty({total}, DType::i64);
  d.num_classes = l.classes;
  d.mean = l.mean;
  d.std = l.std;
  int64_t n = 0;
  for (const auto& bytes : contents) {
    for (size_t at = 0; at < bytes.size(); at += record, ++n) {
      d.labels.data<int64_t>()[n] = bytes[at + l.label_at];
      std::copy(bytes.begin() + at + l.label_bytes, bytes.begin() + at + record,
                d.images.data<uint8_t>() + n * pixels);
    }
  }
  return d;
}

Dataset load_cifar(const std::string& dir, const std::vector<std::string>& names,
                   const CifarLayout& layout, const char* set_name) {
  std::vector<std::string> paths;
  std::vector<std::vector<uint8_t>> contents;
  for (const auto& name : names) {
    fs::path path = fs::path(dir) / name;
    PAC_CHECK(fs::exists(path),
              "{}: no {} in '{}' (set --data-dir to the folder of the {} binary version)",
              layout.name, name, dir, set_name);
    paths.push_back(path.string());
    contents.push_back(read_file_bytes(path.string(), uint64_t{1} << 32));
  }
  return decode_cifar(paths, contents, layout);
}

}  // namespace

Dataset load_cifar10(const std::string& dir, bool train) {
  std::vector<std::string> names;
  if (train) {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    names.push_back("test_batch.bin");
  }
  return load_cifar(dir, names, cifar10_layout(), "CIFAR-10");
}

Dataset decode_cifar10(const std::vector<std::string>& names,
                       const std::vector<std::vector<uint8_t>>& contents) {
  return decode_cifar(names, contents, cifar10_layout());
}

Dataset load_cifar100(const std::string& dir, bool train, bool coarse) {
  return load_cifar(dir, {train ? "train.bin" : "test.bin"}, cifar100_layout(coarse), "CIFAR-100");
}

Dataset decode_cifar100(const std::vector<std::string>& names,
                        const std::vector<std::vector<uint8_t>>& contents, bool coarse) {
  return decode_cifar(names, contents, cifar100_layout(coarse));
}

Dataset make_synthetic(int64_t size, int64_t channels, int64_t image_size, int64_t num_classes,
                       uint64_t seed) {
  PAC_CHECK(size > 0 && channels > 0 && image_size > 0 && num_classes > 1,
            "synthetic data: bad sizes n={} c={} image={} classes={}", size, channels, image_size,
            num_classes);
  Generator g(seed);
  Dataset d;
  d.name = "synthetic";
  d.num_classes = num_classes;
  d.images = Tensor::empty({size, channels, image_size, image_size}, DType::u8);
  d.labels = Tensor::empty({size}, DType::i64);
  d.mean.assign(channels, 0.5f);
  d.std.assign(channels, 0.25f);
  int64_t plane = image_size * image_size, per_image = channels * plane;
  uint8_t* px = d.images.data<uint8_t>();
  for (int64_t i = 0; i < size; ++i) {
    int64_t label = static_cast<int64_t>(g.below(num_classes));
    d.labels.data<int64_t>()[i] = label;
    for (int64_t j = 0; j < per_image; ++j) {
      // A class-dependent stripe over noise: enough structure to learn.
      bool stripe = ((j % plane) / image_size) % num_classes == label;
      float v = 64.0f + 64.0f * g.uniform() + (stripe ? 96.0f : 0.0f);
      px[i * per_image + j] = static_cast<uint8_t>(std::min(255.0f, v));
    }
  }
  return d;
}

}  // namespace pac::data
