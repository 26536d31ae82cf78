// Writes the fuzz targets' seed corpus: small valid inputs that the fuzzer mutates from.
//   pactrain-fuzz-seeds FOLDER   writes FOLDER/idx/*, FOLDER/cifar/*, FOLDER/checkpoint/*,
//                                FOLDER/image/*, FOLDER/coded/*
// The committed fuzz/corpus/ was made by it; inputs that once made a target fail are added there
// by hand, named after what they found (or written here, as regression-overlapping-extents).
#include <png.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/checkpoint.h"
#include "comm/coded_fields.h"
#include "comm/packed_fields.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "fuzz/model.h"
#include "optim/sgd.h"

using namespace pac;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  PAC_CHECK(out.good(), "{}: cannot write", path.string());
}

std::vector<uint8_t> idx(const std::vector<uint32_t>& shape) {
  std::vector<uint8_t> bytes{0, 0, 0x08, static_cast<uint8_t>(shape.size())};
  size_t n = 1;
  for (uint32_t d : shape) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<uint8_t>(d >> s));
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) bytes.push_back(static_cast<uint8_t>(i * 37));
  return bytes;
}

std::vector<uint8_t> gzip(const std::vector<uint8_t>& in) {
  z_stream z{};
  PAC_CHECK(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK, "zlib");
  std::vector<uint8_t> out(deflateBound(&z, in.size()));
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  PAC_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END, "zlib");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

// A small picture with `channels` (1: grey, 3: RGB, 4: RGBA or CMYK) of w x h.
std::vector<uint8_t> picture(int w, int h, int channels) {
  std::vector<uint8_t> pixels(static_cast<size_t>(w * h * channels));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7 + i / 13);
  return pixels;
}

std::vector<uint8_t> jpeg(int w, int h, int format, int subsampling) {
  tjhandle tj = tjInitCompress();
  const int channels = tjPixelSize[format];
  std::vector<uint8_t> pixels = picture(w, h, channels);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  PAC_CHECK(tjCompress2(tj, pixels.data(), w, 0, h, format, &out, &size, subsampling, 90, 0) == 0,
            "cannot write a JPEG seed: {}", tjGetErrorStr2(tj));
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  return bytes;
}

std::vector<uint8_t> png(int w, int h, uint32_t format) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = w, image.height = h, image.format = format;
  std::vector<uint8_t> pixels = picture(w, h, PNG_IMAGE_PIXEL_CHANNELS(format));
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr);
  std::vector<uint8_t> bytes(size);
  PAC_CHECK(png_image_write_to_memory(&image, bytes.data(), &size, 0, pixels.data(), 0, nullptr),
            "cannot write a PNG seed: {}", image.message);
  bytes.resize(size);
  return bytes;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FOLDER\n", argv[0]);
    return 2;
  }
  fs::path root = argv[1];
  for (const char* target : {"idx", "cifar", "checkpoint", "image", "coded"})
    fs::create_directories(root / target);

  // Every path of the decoder: RGB (4:2:0 and 4:4:4), grey and CMYK JPEG; RGB, RGBA and grey PNG.
  write(root / "image" / "rgb-420.jpg", jpeg(24, 17, TJPF_RGB, TJSAMP_420));
  write(root / "image" / "rgb-444.jpg", jpeg(9, 20, TJPF_RGB, TJSAMP_444));
  write(root / "image" / "grey.jpg", jpeg(16, 16, TJPF_GRAY, TJSAMP_GRAY));
  write(root / "image" / "cmyk.jpg", jpeg(12, 10, TJPF_CMYK, TJSAMP_444));
  write(root / "image" / "rgb.png", png(13, 7, PNG_FORMAT_RGB));
  write(root / "image" / "rgba.png", png(8, 8, PNG_FORMAT_RGBA));
  write(root / "image" / "grey.png", png(21, 5, PNG_FORMAT_GRAY));
  // And cut short: the paths that refuse a file.
  std::vector<uint8_t> cut = jpeg(24, 17, TJPF_RGB, TJSAMP_420);
  cut.resize(cut.size() / 2);
  write(root / "image" / "truncated.jpg", cut);
  cut = png(13, 7, PNG_FORMAT_RGB);
  cut.resize(cut.size() * 2 / 3);
  write(root / "image" / "truncated.png", cut);

  write(root / "idx" / "images-2x3x3", idx({2, 3, 3}));
  write(root / "idx" / "labels-4", idx({4}));
  write(root / "idx" / "images-2x3x3.gz", gzip(idx({2, 3, 3})));

  std::vector<uint8_t> cifar(2 * 3073);
  for (size_t i = 0; i < cifar.size(); ++i) cifar[i] = static_cast<uint8_t>(i * 13);
  cifar[0] = 3;
  cifar[3073] = 9;
  write(root / "cifar" / "two-records.bin", cifar);

  // A checkpoint after one step of a pruned run: weights, a mask, momentum, a pruner and one
  // rank's compressor state.
  default_generator().manual_seed(1);
  models::ModelConfig config = fuzz::model_config();
  nn::ModulePtr model = models::make_model(config);
  optim::Sgd sgd(model->named_parameters(), {0.1f, 0.9f});
  auto named = model->named_parameters();
  for (auto& [name, p] : named) {
    if (p->shape().size() < 2) continue;
    Tensor mask = Tensor::full(p->shape(), 1.0f).to(DType::u8);
    mask.data<uint8_t>()[0] = 0;
    p->set_mask(mask);
    break;
  }
  Tensor x = Generator(2).randn({2, 1, 8, 8});
  Tensor y = Tensor::from_indices({0, 2}, {2});
  cross_entropy((*model)(x), y).backward();
  sgd.step();
  RunState run;
  run.compressor = "topk";
  run.prune = "taylor";
  run.pruner = {{"events", counter_tensor(1)}, {"criterion.observed", counter_tensor(1)}};
  run.ranks = {{{"generator", Tensor::from_indices({1, 2, 3, 4}, {4})},
                {"compressor.bucket0.steps", counter_tensor(1)},
                {"compressor.bucket0.residual", Tensor::zeros({4})}}};
  save_checkpoint((root / "checkpoint" / "pruned-step1.safetensors").string(), config, *model, &sgd,
                  {1, 0, 1, 1}, "sgd", run);
  // A regression input: 64 tensors that each claim the whole 4 kB data section. Allocated one by
  // one before their extents were compared, such entries made a small file claim its data section
  // many times over in memory.
  std::string header = "{";
  for (int i = 0; i < 64; ++i) {
    header +=
        fmt::format("{}\"t{}\":{{\"dtype\":\"U8\",\"shape\":[4096],\"data_offsets\":[0,4096]}}",
                    i ? "," : "", i);
  }
  header += "}";
  std::vector<uint8_t> crafted(8 + header.size() + 4096, 0);
  for (int i = 0; i < 8; ++i) crafted[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::copy(header.begin(), header.end(), crafted.begin() + 8);
  write(root / "checkpoint" / "regression-overlapping-extents.safetensors", crafted);
  // Coded sums (coded_fuzzer.cpp): 300 sums bunched in the middle of 0..48 (Rice codes), and
  // spread over 0..63, which its 6-bit fields hold without waste (fields).
  for (bool bunched : {true, false}) {
    const int64_t values = 300, largest = bunched ? 48 : 63;
    const int bits = comm::bits_for(largest);
    std::vector<uint64_t> words(comm::packed_words(values, bits), 0);
    for (int64_t j = 0; j < values; ++j) {
      const uint64_t sum = bunched ? 24 + (j * 7 % 9) - 4 : j * 37 % 64;
      words[j / comm::fields_per_word(bits)] |= sum << (j % comm::fields_per_word(bits) * bits);
    }
    std::vector<char> message(comm::coded_bytes_bound(values, largest));
    message.resize(comm::encode_fields(words.data(), bits, values, largest, message.data()));
    PAC_CHECK((message[0] == 0) == !bunched, "the coded seeds: expected {} for {} sums",
              bunched ? "Rice codes" : "fields", bunched ? "bunched" : "spread");
    std::vector<uint8_t> input{uint8_t(values & 0xff), uint8_t(values >> 8), uint8_t(largest - 1)};
    input.insert(input.end(), message.begin(), message.end());
    write(root / "coded" / (bunched ? "rice.bin" : "fields.bin"), input);
  }
  std::printf("seeds written under %s\n", root.string().c_str());
  return 0;
}
