// The image folder: decoding against Pillow's pixels, torchvision's transform geometry and
// resampling, the folder's listing and its errors, and the loader's determinism and sharding.
// The files are made at build time by tests/fixtures/make_image_folder.py.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "apps/data/image_decode.h"
#include "apps/data/image_folder.h"
#include "apps/data/image_folder_loader.h"
#include "apps/data/image_transforms.h"
#include "apps/data/prefetch.h"
#include "apps/file_io.h"
#include "apps/run_data.h"
#include "apps/trainer.h"
#include "core/error.h"

using namespace pac;
using namespace pac::data;

namespace {

const std::string kRoot = PAC_IMAGE_FIXTURE_DIR;

std::vector<uint8_t> bytes_of(const std::string& path) { return read_file_bytes(path, 1 << 26); }

EncodedImage open_image(const std::string& path) { return EncodedImage(bytes_of(path), path); }

std::string decode_error(const std::string& path) {
  try {
    open_image(path).decode();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string scan_error(const std::string& dir) {
  try {
    scan_image_folder(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Undoes a normalisation of mean 0 and std 1: back to 8-bit levels.
std::vector<int> levels(const std::vector<float>& planes) {
  std::vector<int> out(planes.size());
  for (size_t i = 0; i < planes.size(); ++i)
    out[i] = static_cast<int>(std::lround(planes[i] * 255));
  return out;
}

Normalisation identity() {
  Normalisation n;
  n.mean = {0, 0, 0};
  n.std = {1, 1, 1};
  return n;
}

// The largest difference between planes (3, S, S) and Pillow's bytes (S, S, 3).
int max_level_difference(const std::vector<int>& planes, const std::vector<uint8_t>& rgb,
                         int64_t size) {
  int worst = 0;
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < size * size; ++i) {
      worst = std::max(worst, std::abs(planes[c * size * size + i] - rgb[i * 3 + c]));
    }
  }
  return worst;
}

std::vector<float> batch_values(const Batch& b) {
  return std::vector<float>(b.inputs.data<float>(), b.inputs.data<float>() + b.inputs.numel());
}

}  // namespace

TEST_CASE("image decoding gives Pillow's RGB pixels for JPEG and PNG of every mode") {
  std::ifstream list(kRoot + "/reference.txt");
  REQUIRE(list.good());
  std::string relative;
  int64_t width = 0, height = 0;
  std::set<std::string> kinds;
  while (list >> relative >> width >> height) {
    CAPTURE(relative);
    const EncodedImage image = open_image(kRoot + "/folder/" + relative);
    CHECK(image.width() == width);
    CHECK(image.height() == height);
    const RgbImage rgb = image.decode();
    REQUIRE(rgb.width == width);
    REQUIRE(rgb.height == height);
    std::string name = relative;
    std::replace(name.begin(), name.end(), '/', '_');
    // The same libjpeg-turbo with the same settings, and lossless PNG: exactly Pillow's.
    CHECK(rgb.pixels == bytes_of(kRoot + "/reference/" + name + ".rgb"));
    kinds.insert(relative.substr(relative.rfind('_') + 1));
  }
  // Every decoder path ran: RGB, greyscale and CMYK JPEG (also spelt .JPEG, as ImageNet does);
  // RGB, RGBA, grey and palette PNG.
  CHECK(kinds == std::set<std::string>{"big.JPEG", "big.jpg", "cmyk.JPEG", "cmyk.jpg", "grey.jpg",
                                       "png-grey.png", "png-palette.png", "png-rgb.png",
                                       "png-rgba.png", "rgb.jpg"});
}

TEST_CASE("a JPEG decodes at a reduced DCT scale close to the full image's area average") {
  const std::string path = kRoot + "/folder/train/ant/ant_02_big.jpg";
  const EncodedImage image = open_image(path);
  const RgbImage full = image.decode(1.0);
  // The smallest n/8 at or above the scale asked for.
  CHECK(image.decode(0.5).width == 60);
  CHECK(image.decode(0.51).width == 75);
  CHECK(image.decode(0.01).width == 15);
  const RgbImage half = image.decode(0.5);
  REQUIRE(half.height == 48);
  double difference = 0;
  for (int64_t y = 0; y < 48; ++y) {
    for (int64_t x = 0; x < 60; ++x) {
      for (int c = 0; c < 3; ++c) {
        double mean = 0;
        for (int dy = 0; dy < 2; ++dy) {
          for (int dx = 0; dx < 2; ++dx) {
            mean += full.pixels[((2 * y + dy) * 120 + 2 * x + dx) * 3 + c] / 4.0;
          }
        }
        difference += std::abs(mean - half.pixels[(y * 60 + x) * 3 + c]);
      }
    }
  }
  CHECK(difference / (48 * 60 * 3) < 4.0);
  // A PNG always decodes whole.
  CHECK(open_image(kRoot + "/folder/train/ant/ant_03_png-rgb.png").decode(0.2).width == 36);
}

TEST_CASE("corrupt and truncated images are errors that name the file") {
  const std::string dir = kRoot + "/corrupt/train/";
  std::string e = decode_error(dir + "ant/truncated.jpg");
  CHECK(e.find("truncated.jpg: a corrupt or truncated JPEG") != std::string::npos);
  e = decode_error(dir + "bee/truncated.png");
  CHECK(e.find("truncated.png: a corrupt or truncated PNG") != std::string::npos);
  e = decode_error(dir + "bee/text.jpg");
  CHECK(e.find("text.jpg: neither a JPEG nor a PNG") != std::string::npos);
  CHECK_THROWS_WITH_AS(open_image(kRoot + "/corrupt/train/ant/no-such.jpg"),
                       doctest::Contains("no-such.jpg"), Error);
  // A PNG header claiming 2^32 - 1 pixels a side: refused before any arithmetic overflows (the
  // fuzzer's first finding).
  std::vector<uint8_t> huge{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
                            0,    0,   0,   13,  'I',  'H',  'D',  'R'};
  huge.insert(huge.end(), 8, 0xff);
  huge.insert(huge.end(), 9, 0);
  CHECK_THROWS_WITH_AS(EncodedImage(huge, "huge.png"),
                       doctest::Contains("huge.png: the header says 4294967295x4294967295 pixels"),
                       Error);
}

TEST_CASE("an image folder lists torchvision's layout, skips non-images and names bad classes") {
  const ImageFolder f = scan_image_folder(kRoot + "/folder");
  CHECK(f.classes == std::vector<std::string>{"ant", "bee", "cat"});
  CHECK(f.train.size() == 24);
  CHECK(f.val.size() == 9);
  // labels.txt and .DS_Store
  CHECK(f.skipped == 2);
  CHECK(f.first_skipped.find("labels.txt") != std::string::npos);
  // Sorted by class, then by file; the label is the class's index.
  CHECK(f.train.front().path.find("/train/ant/ant_00_") != std::string::npos);
  CHECK(f.train.front().label == 0);
  CHECK(f.train.back().label == 2);
  for (size_t i = 1; i < f.train.size(); ++i) {
    CHECK(std::make_pair(f.train[i - 1].label, f.train[i - 1].path) <
          std::make_pair(f.train[i].label, f.train[i].path));
  }
  CHECK(scan_error(kRoot + "/empty_class")
            .find("class folder " + kRoot + "/empty_class/train/bee has no images") !=
        std::string::npos);
  CHECK(scan_error(kRoot + "/missing_val")
            .find("class 'bee' is in " + kRoot + "/missing_val/train but not in") !=
        std::string::npos);
  CHECK(scan_error(kRoot + "/extra_val")
            .find("class 'bee' is in " + kRoot + "/extra_val/val but not in") != std::string::npos);
  CHECK(scan_error(kRoot + "/reference").find("reference/train is not a folder") !=
        std::string::npos);
  CHECK(scan_error("").find("needs --data-dir") != std::string::npos);
}

TEST_CASE("RandomResizedCrop draws torchvision's boxes") {
  Generator g(5);
  int fallbacks = 0;
  for (int i = 0; i < 2000; ++i) {
    const ResizeWindow w = random_resized_crop(400, 300, g);
    REQUIRE(w.x >= 0);
    REQUIRE(w.y >= 0);
    REQUIRE(w.x + w.width <= 400);
    REQUIRE(w.y + w.height <= 300);
    // Integer boxes, and the filter reads only the crop (torchvision crops, then resizes).
    CHECK(w.x == std::floor(w.x));
    CHECK(w.bounds_x0 == w.x);
    CHECK(w.bounds_x1 == w.x + w.width);
    const double share = w.width * w.height / (400.0 * 300.0);
    const double ratio = w.width / w.height;
    if (share == 1.0) ++fallbacks;
    CHECK(share >= 0.079);
    CHECK(ratio >= 0.74);
    CHECK(ratio <= 1.35);
  }
  CHECK(fallbacks < 100);
  // An image of an extreme shape never fits a box of an allowed ratio: the centre crop of the
  // nearest ratio instead (4/3 of the height).
  const ResizeWindow strip = random_resized_crop(1000, 12, g);
  CHECK(strip.width == 16);
  CHECK(strip.height == 12);
  CHECK(strip.x == (1000 - 16) / 2);
}

TEST_CASE("the evaluation window is Resize then CenterCrop in the original's pixels") {
  // 500x375: the shorter side to 256 makes 341x256; the 224 crop starts at round(58.5) = 58
  // (half to even, as Python rounds) and 16.
  const ResizeWindow w = resize_center_crop(500, 375, 256, 224);
  CHECK(w.x == doctest::Approx(58 * 500.0 / 341));
  CHECK(w.y == doctest::Approx(16 * 375.0 / 256));
  CHECK(w.width == doctest::Approx(224 * 500.0 / 341));
  CHECK(w.bounds_x1 == 500);  // the resize saw the whole image
  CHECK(needed_scale(w, 224) == doctest::Approx(256.0 / 375));
}

TEST_CASE("resizing matches Pillow's bilinear filter as torchvision calls it, to one level") {
  std::ifstream list(kRoot + "/transforms.txt");
  REQUIRE(list.good());
  std::string line;
  int cases = 0;
  while (std::getline(list, line)) {
    CAPTURE(line);
    std::istringstream in(line);
    std::string kind, relative, reference;
    in >> kind >> relative;
    const RgbImage image = open_image(kRoot + "/folder/" + relative).decode();
    ResizeWindow window;
    int64_t size = 0;
    if (kind == "eval") {
      int64_t resize = 0;
      in >> resize >> size;
      window = resize_center_crop(image.width, image.height, resize, size);
    } else {
      int64_t x = 0, y = 0, w = 0, h = 0;
      in >> x >> y >> w >> h >> size;
      window = {double(x), double(y), double(w), double(h), x, y, x + w, y + h};
    }
    in >> reference;
    std::vector<float> out(static_cast<size_t>(3 * size * size));
    resize_normalise(image, window, size, false, identity(), out.data());
    CHECK(max_level_difference(levels(out), bytes_of(kRoot + "/transforms/" + reference), size) <=
          1);
    // A flip mirrors the columns.
    std::vector<float> flipped(out.size());
    resize_normalise(image, window, size, true, identity(), flipped.data());
    CHECK(flipped[size - 1] == out[0]);
    CHECK(flipped[2 * size * size + size] == out[2 * size * size + 2 * size - 1]);
    ++cases;
  }
  CHECK(cases == 6);
  // Normalisation: (v / 255 - mean) / std per channel.
  const RgbImage image = open_image(kRoot + "/folder/train/ant/ant_02_big.jpg").decode();
  const ResizeWindow whole = {0, 0, 120, 96, 0, 0, 120, 96};
  std::vector<float> raw(3 * 16 * 16), normalised(raw.size());
  resize_normalise(image, whole, 16, false, identity(), raw.data());
  resize_normalise(image, whole, 16, false, Normalisation{}, normalised.data());
  CHECK(normalised[0] == doctest::Approx((raw[0] - 0.485f) / 0.229f).epsilon(1e-5));
  CHECK(normalised[2 * 256 + 7] ==
        doctest::Approx((raw[2 * 256 + 7] - 0.406f) / 0.225f).epsilon(1e-5));
}

TEST_CASE("the image-folder loader: the same batches on any number of threads and ranks") {
  const ImageFolder f = scan_image_folder(kRoot + "/folder");
  ImageFolderLoaderOptions o;
  o.batch = 6, o.seed = 3, o.image_size = 24;
  // One rank, no threads: the reference epoch 1.
  ImageFolderLoader one(f.train, o);
  one.set_epoch(1);
  REQUIRE(one.num_batches() == 4);
  std::vector<Batch> reference;
  for (int64_t b = 0; b < 4; ++b) reference.push_back(one.batch(b));
  // The same through three worker threads.
  Prefetcher ahead(std::make_unique<ImageFolderLoader>(f.train, o), 3, 2);
  ahead.set_epoch(1);
  for (int64_t b = 0; b < 4; ++b) {
    const Batch batch = ahead.batch(b);
    CHECK(batch.samples == reference[b].samples);
    CHECK(batch_values(batch) == batch_values(reference[b]));
  }
  // Three ranks with a third of the batch each: batch b of all of them is the same global
  // batch, sample for sample and pixel for pixel.
  o.batch = 2, o.world_size = 3;
  std::map<int64_t, std::vector<float>> by_sample;
  for (int64_t b = 0; b < 4; ++b) {
    const int64_t s = o.image_size;
    for (size_t i = 0; i < reference[b].samples.size(); ++i) {
      const float* p = reference[b].inputs.data<float>() + i * 3 * s * s;
      by_sample[reference[b].samples[i]] = std::vector<float>(p, p + 3 * s * s);
    }
  }
  for (int64_t rank = 0; rank < 3; ++rank) {
    o.rank = rank;
    ImageFolderLoader shard(f.train, o);
    shard.set_epoch(1);
    CHECK(shard.num_batches() == 4);
    for (int64_t b = 0; b < 4; ++b) {
      const Batch batch = shard.batch(b);
      for (size_t i = 0; i < batch.samples.size(); ++i) {
        // Rank r's i-th sample of batch b sits at place r + 3 (2 b + i) of the epoch's order,
        // the 1-rank loader's place 6 b + r + 3 i.
        CHECK(batch.samples[i] == reference[b].samples[rank + 3 * i]);
        const int64_t s = o.image_size;
        const float* p = batch.inputs.data<float>() + i * 3 * s * s;
        CHECK(std::vector<float>(p, p + 3 * s * s) == by_sample.at(batch.samples[i]));
        CHECK(batch.targets.data<int64_t>()[i] == f.train[batch.samples[i]].label);
      }
    }
  }
  // Another epoch is another order and other crops.
  one.set_epoch(2);
  CHECK(one.batch(0).samples != reference[0].samples);
}

TEST_CASE("the evaluation loader takes every file in order with the centre crop") {
  const ImageFolder f = scan_image_folder(kRoot + "/folder");
  ImageFolderLoaderOptions o;
  o.batch = 4, o.train = false, o.image_size = 16;
  ImageFolderLoader loader(f.val, o);
  REQUIRE(loader.num_batches() == 3);  // 9 images: 4, 4 and 1
  std::vector<int64_t> seen;
  for (int64_t b = 0; b < 3; ++b) {
    const Batch batch = loader.batch(b);
    seen.insert(seen.end(), batch.samples.begin(), batch.samples.end());
  }
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  // Deterministic: no draws.
  CHECK(batch_values(loader.batch(1)) == batch_values(ImageFolderLoader(f.val, o).batch(1)));
}

TEST_CASE(
    "a corrupt file stops the loader naming it, or with skip_corrupt is replaced and counted") {
  const ImageFolder f = scan_image_folder(kRoot + "/corrupt");
  REQUIRE(f.train.size() == 7);
  ImageFolderLoaderOptions o;
  o.batch = 7, o.image_size = 16;
  const std::string named = kRoot + "/corrupt/train/";
  CHECK_THROWS_WITH_AS(ImageFolderLoader(f.train, o).batch(0), doctest::Contains(named.c_str()),
                       Error);
  o.skip_corrupt = true;
  ImageFolderLoader skipping(f.train, o);
  const Batch batch = skipping.batch(0);
  CHECK(batch.samples.size() == 7);
  CHECK(skipping.corrupt_skipped() >= 3);
  for (int64_t s : batch.samples) CHECK(f.train[s].path.find("truncated") == std::string::npos);
  CHECK(skipping.first_corrupt().find(kRoot + "/corrupt/train/") != std::string::npos);
}

TEST_CASE("a model's classes and normalisation come from the folder and must match it") {
  TrainOptions o;
  o.data = "imagefolder";
  o.data_dir = kRoot + "/folder";
  o.model.name = "resnet20";
  o.model.in_channels = o.model.num_classes = o.model.image_size = 0;
  RunData data = load_run_data(o, true);
  models::ModelConfig c = resolve_model_config(o.model, data);
  CHECK(c.in_channels == 3);
  CHECK(c.num_classes == 3);
  CHECK(c.image_size == 224);
  CHECK(c.classes == std::vector<std::string>{"ant", "bee", "cat"});
  CHECK(c.normalize_mean == std::vector<float>{0.485f, 0.456f, 0.406f});
  models::ModelConfig other = c;
  other.classes = {"ant", "bug", "cat"};
  CHECK_THROWS_WITH_AS(resolve_model_config(other, data),
                       doctest::Contains("class 1 is 'bug' for the model and 'bee' in the folder"),
                       Error);
  // The in-memory sets normalise by their own statistics.
  TrainOptions synthetic;
  synthetic.data = "synthetic";
  synthetic.model.normalize_mean = {0.5f, 0.5f, 0.5f};
  synthetic.model.in_channels = synthetic.model.num_classes = synthetic.model.image_size = 0;
  CHECK_THROWS_WITH_AS(resolve_model_config(synthetic.model, load_run_data(synthetic, true)),
                       doctest::Contains("apply to --data imagefolder"), Error);
  o.crop_padding = 4;
  CHECK_THROWS_WITH_AS(load_run_data(o, true), doctest::Contains("RandomResizedCrop"), Error);
}
