// Data readers on small files written here (valid and corrupt), and the loader's sharding,
// shuffling and augmentation.
#include <doctest/doctest.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "apps/data/dataset.h"
#include "apps/data/idx.h"
#include "apps/data/loader.h"
#include "apps/data/prefetch.h"

using namespace pac;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("pactrain-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::vector<unsigned char> idx_bytes(std::vector<uint32_t> dims, int fill_count = -1) {
  std::vector<unsigned char> out{0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  size_t total = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(d >> s));
    total *= d;
  }
  size_t n = fill_count < 0 ? total : static_cast<size_t>(fill_count);
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<unsigned char>(i % 10));
  return out;
}

void write(const std::string& path, const std::vector<unsigned char>& bytes, bool gzip = false) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
}

void write_mnist(const TempDir& dir, int64_t n, bool gzip) {
  std::string ext = gzip ? ".gz" : "";
  write(dir / ("train-images-idx3-ubyte" + ext), idx_bytes({uint32_t(n), 4, 4}), gzip);
  write(dir / ("train-labels-idx1-ubyte" + ext), idx_bytes({uint32_t(n)}), gzip);
}

}  // namespace

TEST_CASE("IDX files load plain and gzipped") {
  for (bool gzip : {false, true}) {
    TempDir dir;
    write_mnist(dir, 12, gzip);
    data::Dataset d = data::load_mnist_like("fashion-mnist", dir.path.string(), true);
    CHECK(d.images.shape() == Shape{12, 1, 4, 4});
    CHECK(d.labels.dtype() == DType::i64);
    CHECK(d.labels.to_vector()[3] == 3.0f);
    CHECK(d.images.to_vector()[5] == 5.0f);
  }
}

TEST_CASE("malformed IDX files are reported with the file and what was wrong") {
  TempDir dir;
  std::string path = dir / "bad";
  auto bytes = idx_bytes({2, 3});
  bytes[0] = 0x12;
  write(path, bytes);
  CHECK_THROWS_WITH_AS(data::read_idx(path), doctest::Contains("bad magic number 12000802"), Error);
  write(path, idx_bytes({2, 3}, 5));
  CHECK_THROWS_WITH_AS(data::read_idx(path),
                       doctest::Contains("file ends at byte 17 while reading the elements"), Error);
  write(path, idx_bytes({2, 3}, 7));
  CHECK_THROWS_WITH_AS(data::read_idx(path), doctest::Contains("continues past the 18 bytes"),
                       Error);
  bytes = idx_bytes({2, 3});
  bytes[2] = 0x0d;  // float elements
  write(path, bytes);
  CHECK_THROWS_WITH_AS(data::read_idx(path), doctest::Contains("expected 0x08"), Error);
  write(path, {0, 0, 8});
  CHECK_THROWS_WITH_AS(data::read_idx(path), doctest::Contains("while reading the magic number"),
                       Error);
  CHECK_THROWS_WITH_AS(data::read_idx(dir / "missing"), doctest::Contains("cannot open"), Error);
}

TEST_CASE("IDX sizes are checked before allocation; broken gzip data is named") {
  // 4 dimensions of 2^31 - 1 each: the element count must not overflow, nor be allocated.
  std::vector<uint8_t> huge = {0, 0, 8, 4};
  for (int d = 0; d < 4; ++d) {
    for (uint8_t b : {0x7f, 0xff, 0xff, 0xff}) huge.push_back(b);
  }
  CHECK_THROWS_WITH_AS(data::decode_idx(huge, "huge"), doctest::Contains("implausibly large"),
                       Error);
  // A header that promises 2^30 elements with 3 present: refused from the sizes alone.
  std::vector<uint8_t> promise = {0, 0, 8, 1, 0x40, 0, 0, 0, 1, 2, 3};
  CHECK_THROWS_WITH_AS(data::decode_idx(promise, "promise"),
                       doctest::Contains("file ends at byte 11 while reading the elements"), Error);

  TempDir dir;
  std::string path = dir / "images.gz";
  write(path, idx_bytes({3, 4, 4}), true);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(data::decode_idx(gz, "whole").shape() == Shape{3, 4, 4});
  std::vector<uint8_t> truncated(gz.begin(), gz.end() - 12);
  CHECK_THROWS_WITH_AS(data::decode_idx(truncated, "cut"),
                       doctest::Contains("cut: the gzip data ends early"), Error);
  std::vector<uint8_t> trailing = gz;
  for (char c : {'x', 'y', 'z'}) trailing.push_back(static_cast<uint8_t>(c));
  CHECK_THROWS_WITH_AS(data::decode_idx(trailing, "tail"),
                       doctest::Contains("3 bytes of something else follow the gzip data"), Error);
  std::vector<uint8_t> corrupt = gz;
  corrupt[12] ^= 0xff;
  CHECK_THROWS_AS(data::decode_idx(corrupt, "corrupt"), Error);
  std::vector<uint8_t> two_members = gz;  // gzip allows concatenated members
  two_members.insert(two_members.end(), gz.begin(), gz.end());
  CHECK_THROWS_WITH_AS(data::decode_idx(two_members, "two"),
                       doctest::Contains("data continues past the 64 bytes"), Error);
}

TEST_CASE("image and label files that disagree are refused") {
  TempDir dir;
  write(dir / "train-images-idx3-ubyte", idx_bytes({5, 4, 4}));
  write(dir / "train-labels-idx1-ubyte", idx_bytes({4}));
  CHECK_THROWS_WITH_AS(data::load_mnist_like("mnist", dir.path.string(), true),
                       doctest::Contains("4 labels for 5 images"), Error);
  write(dir / "train-images-idx3-ubyte", idx_bytes({5, 16}));
  CHECK_THROWS_WITH_AS(data::load_mnist_like("mnist", dir.path.string(), true),
                       doctest::Contains("images must have 3 dimensions"), Error);
  TempDir empty;
  CHECK_THROWS_WITH_AS(data::load_mnist_like("mnist", empty.path.string(), false),
                       doctest::Contains("set --data-dir"), Error);
}

TEST_CASE("CIFAR-10 binary files: records, labels and sizes are checked") {
  TempDir dir;
  std::vector<unsigned char> bytes(2 * 3073, 7);
  bytes[0] = 3;
  bytes[3073] = 9;
  write(dir / "test_batch.bin", bytes);
  data::Dataset d = data::load_cifar10(dir.path.string(), false);
  CHECK(d.images.shape() == Shape{2, 3, 32, 32});
  CHECK(d.labels.to_vector() == std::vector<float>{3, 9});
  bytes.pop_back();
  write(dir / "test_batch.bin", bytes);
  CHECK_THROWS_WITH_AS(data::load_cifar10(dir.path.string(), false),
                       doctest::Contains("not a whole number of 3073-byte records"), Error);
  bytes.push_back(0);
  bytes[3073] = 10;
  write(dir / "test_batch.bin", bytes);
  CHECK_THROWS_WITH_AS(data::load_cifar10(dir.path.string(), false),
                       doctest::Contains("record 1 has label 10"), Error);
}

TEST_CASE("CIFAR-100 binary files: fine or coarse labels, pixels after both, checked") {
  TempDir dir;
  std::vector<unsigned char> bytes(2 * 3074, 0);
  bytes[0] = 4;  // record 0: superclass 4, class 30
  bytes[1] = 30;
  bytes[2] = 11;     // its first pixel
  bytes[3074] = 19;  // record 1: superclass 19, class 99
  bytes[3075] = 99;
  bytes[2 * 3074 - 1] = 200;  // its last pixel
  write(dir / "train.bin", bytes);
  data::Dataset fine = data::load_cifar100(dir.path.string(), true);
  CHECK(fine.name == "cifar100");
  CHECK(fine.num_classes == 100);
  CHECK(fine.images.shape() == Shape{2, 3, 32, 32});
  CHECK(fine.labels.to_vector() == std::vector<float>{30, 99});
  CHECK(fine.images.data<uint8_t>()[0] == 11);
  CHECK(fine.images.data<uint8_t>()[2 * 3072 - 1] == 200);
  data::Dataset coarse = data::load_cifar100(dir.path.string(), true, /*coarse=*/true);
  CHECK(coarse.num_classes == 20);
  CHECK(coarse.labels.to_vector() == std::vector<float>{4, 19});
  bytes[3075] = 100;
  write(dir / "train.bin", bytes);
  CHECK_THROWS_WITH_AS(data::load_cifar100(dir.path.string(), true),
                       doctest::Contains("record 1 has label 100, expected 0 to 99"), Error);
  bytes.resize(3073);
  write(dir / "train.bin", bytes);
  CHECK_THROWS_WITH_AS(data::load_cifar100(dir.path.string(), true),
                       doctest::Contains("not a whole number of 3074-byte records (2 label bytes"),
                       Error);
  CHECK_THROWS_WITH_AS(data::load_cifar100(dir.path.string(), false),
                       doctest::Contains("no test.bin in"), Error);
}

TEST_CASE("loader shards disjointly, shuffles per epoch, and is reproducible") {
  data::Dataset d = data::make_synthetic(103, 1, 6, 4, 1);
  int64_t batches = -1;
  for (int64_t rank = 0; rank < 3; ++rank) {
    data::Loader loader(d, {10, true, 5, rank, 3});
    if (batches >= 0) CHECK(loader.num_batches() == batches);
    batches = loader.num_batches();
    CHECK(loader.samples_per_rank() == 34);
    for (int64_t b = 0; b < loader.num_batches(); ++b) {
      CHECK(loader.batch(b).inputs.shape() == Shape{10, 1, 6, 6});
    }
  }
  data::Loader a(d, {8, true, 5}), b(d, {8, true, 5});
  CHECK(a.batch(2).targets.to_vector() == b.batch(2).targets.to_vector());
  auto epoch0 = a.batch(0).targets.to_vector();
  a.set_epoch(1);
  bool differs = false;
  for (int i = 0; i < 3 && !differs; ++i) {
    a.set_epoch(1 + i);
    differs = a.batch(0).targets.to_vector() != epoch0;
  }
  CHECK(differs);
  CHECK_THROWS_WITH_AS(data::Loader(d, {8, true, 5, 3, 3}), doctest::Contains("rank 3 is not in"),
                       Error);
  CHECK_THROWS_WITH_AS(a.batch(99), doctest::Contains("does not exist"), Error);
}

TEST_CASE("loader shards cover the data set without overlap") {
  // Labels 0..N-1 identify samples.
  data::Dataset d = data::make_synthetic(20, 1, 2, 2, 1);
  d.labels = Tensor::arange(20, DType::i64);
  std::multiset<float> all;
  for (int64_t rank = 0; rank < 2; ++rank) {
    data::Loader loader(d, {5, true, 9, rank, 2});
    for (int64_t b = 0; b < loader.num_batches(); ++b) {
      for (float v : loader.batch(b).targets.to_vector()) all.insert(v);
    }
  }
  CHECK(all.size() == 20);
  CHECK(std::set<float>(all.begin(), all.end()).size() == 20);
}

TEST_CASE("a global batch is the same samples, augmented alike, on 1, 2 or 4 ranks") {
  data::Dataset d = data::make_synthetic(64, 1, 6, 3, 1);
  d.labels = Tensor::arange(64, DType::i64);  // labels identify samples
  const int64_t global = 8;
  // Batch i of every rank, row by row in the order of the epoch (rank r's row j is place
  // j x P + r): the labels and the augmented images.
  auto global_batch = [&](int64_t ranks, int64_t epoch, int64_t i) {
    std::vector<float> labels(global), images;
    std::vector<std::vector<float>> rows(global);
    for (int64_t r = 0; r < ranks; ++r) {
      data::Loader loader(d, {global / ranks, true, 7, r, ranks, true, 2, true});
      loader.set_epoch(epoch);
      CHECK(loader.num_batches() == 64 / global);
      data::Batch b = loader.batch(i);
      const auto x = b.inputs.to_vector(), y = b.targets.to_vector();
      const int64_t per_row = static_cast<int64_t>(x.size()) / (global / ranks);
      for (int64_t j = 0; j < global / ranks; ++j) {
        labels[j * ranks + r] = y[j];
        rows[j * ranks + r].assign(x.begin() + j * per_row, x.begin() + (j + 1) * per_row);
      }
    }
    for (const auto& row : rows) images.insert(images.end(), row.begin(), row.end());
    return std::pair{labels, images};
  };
  for (int64_t epoch : {0, 3}) {
    for (int64_t i : {0, 5}) {
      CAPTURE(epoch);
      CAPTURE(i);
      const auto one = global_batch(1, epoch, i);
      CHECK(global_batch(2, epoch, i) == one);
      CHECK(global_batch(4, epoch, i) == one);
    }
  }
}

TEST_CASE("normalisation, crop and flip") {
  data::Dataset d = data::make_synthetic(4, 1, 4, 2, 1);
  std::fill_n(d.images.data<uint8_t>(), d.images.numel(), uint8_t{0});
  d.images.data<uint8_t>()[0] = 255;  // top-left pixel of image 0
  d.mean = {0.5f};
  d.std = {0.5f};
  data::Loader plain(d, {4, false});
  auto x = plain.batch(0).inputs.to_vector();
  CHECK(x[0] == doctest::Approx(1.0f));
  CHECK(x[1] == doctest::Approx(-1.0f));
  data::Loader flipped(d, {4, false, 0, 0, 1, true, 0, true});
  bool moved = false;
  for (int64_t epoch = 0; epoch < 8 && !moved; ++epoch) {
    flipped.set_epoch(epoch);
    moved = flipped.batch(0).inputs.to_vector()[3] == doctest::Approx(1.0f);
  }
  CHECK(moved);  // some epoch flips image 0 so its bright pixel lands at the top right
  data::Loader cropped(d, {4, false, 0, 0, 1, true, 2, false});
  CHECK(cropped.batch(0).inputs.shape() == Shape{4, 1, 4, 4});
}

namespace {

// Batch i holds the value i; `fail_at` throws; counts how many batch() calls run at once.
class CountingSource : public data::BatchSource {
 public:
  explicit CountingSource(int64_t fail_at = -1) : fail_at_(fail_at) {}
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t num_batches() const override { return 12; }
  data::Batch batch(int64_t index) const override {
    const int now = ++running_;
    most_ = std::max(most_.load(), now);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --running_;
    PAC_CHECK(index != fail_at_, "batch {} could not be read", index);
    data::Batch b{Tensor::full({1}, static_cast<float>(epoch_ * 100 + index)), Tensor()};
    b.samples = {index};
    return b;
  }
  mutable std::atomic<int> running_{0}, most_{0};

 private:
  int64_t epoch_ = 0, fail_at_;
};

}  // namespace

TEST_CASE("the prefetcher gives the same batches with any number of threads, and their errors") {
  for (int threads : {0, 1, 3}) {
    CAPTURE(threads);
    auto source = std::make_unique<CountingSource>();
    CountingSource* counting = source.get();
    data::Prefetcher loader(std::move(source), threads, 4);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      loader.set_epoch(epoch);
      // A resumed epoch starts midway.
      for (int64_t i = epoch == 0 ? 0 : 5; i < loader.num_batches(); ++i)
        CHECK(loader.batch(i).inputs.to_vector()[0] == static_cast<float>(epoch * 100 + i));
    }
    CHECK(loader.take_wait_seconds() > 0.0);
    CHECK(loader.take_wait_seconds() == 0.0);
    if (threads == 3) CHECK(counting->most_ > 1);  // the workers did run together
  }
  data::Prefetcher failing(std::make_unique<CountingSource>(3), 2, 2);
  failing.set_epoch(0);
  for (int64_t i = 0; i < 3; ++i) failing.batch(i);
  CHECK_THROWS_WITH(failing.batch(3), doctest::Contains("batch 3 could not be read"));
}
