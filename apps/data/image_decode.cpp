#include "apps/data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace pac::data {

namespace {

// Images above this many pixels are refused before anything is allocated: a header claiming
// more is a broken or hostile file, not a photograph (ImageNet's largest is about 10^8 bytes).
constexpr int64_t kMaxPixels = int64_t{1} << 28;

bool starts_with(const std::vector<uint8_t>& bytes, std::initializer_list<uint8_t> magic) {
  return bytes.size() >= magic.size() && std::equal(magic.begin(), magic.end(), bytes.begin());
}

// One TurboJPEG decompressor per thread: a handle holds its error state, so threads may not
// share one, and making one per image costs more than decoding a small one.
tjhandle jpeg_decompressor() {
  struct Handle {
    tjhandle h = tjInitDecompress();
    ~Handle() {
      if (h) tjDestroy(h);
    }
  };
  thread_local Handle handle;
  PAC_CHECK(handle.h != nullptr, "cannot start libjpeg-turbo: {}", tjGetErrorStr2(nullptr));
  return handle.h;
}

uint32_t big_endian(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

}  // namespace

bool has_image_extension(const std::string& path) {
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || path.find('/', dot) != std::string::npos) return false;
  std::string ext = path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

EncodedImage::EncodedImage(std::vector<uint8_t> bytes, std::string name)
    : bytes_(std::move(bytes)), name_(std::move(name)) {
  if (starts_with(bytes_, {0xff, 0xd8, 0xff})) {
    jpeg_ = true;
    int width = 0, height = 0, subsampling = 0, colorspace = 0;
    PAC_CHECK(tjDecompressHeader3(jpeg_decompressor(), bytes_.data(), bytes_.size(), &width,
                                  &height, &subsampling, &colorspace) == 0,
              "{}: not a readable JPEG ({})", name_, tjGetErrorStr2(jpeg_decompressor()));
    width_ = width, height_ = height, jpeg_colorspace_ = colorspace;
  } else if (starts_with(bytes_, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'})) {
    // The IHDR chunk comes first: length, "IHDR", width, height.
    PAC_CHECK(bytes_.size() >= 24 && std::memcmp(bytes_.data() + 12, "IHDR", 4) == 0,
              "{}: a PNG without its IHDR header; the file is truncated or corrupt", name_);
    width_ = big_endian(bytes_.data() + 16), height_ = big_endian(bytes_.data() + 20);
  } else {
    PAC_FAIL("{}: neither a JPEG nor a PNG (its first bytes are not either's signature)", name_);
  }
  // Divided, not multiplied: a PNG's sides may each be up to 2^32 - 1, whose product overflows.
  PAC_CHECK(width_ > 0 && height_ > 0 && width_ <= kMaxPixels / height_,
            "{}: the header says {}x{} pixels; expected a positive size of at most {} pixels",
            name_, width_, height_, kMaxPixels);
}

RgbImage EncodedImage::decode(double scale) const {
  PAC_CHECK(scale > 0.0 && scale <= 1.0, "{}: decode scale {} is not in (0, 1]", name_, scale);
  return jpeg_ ? decode_jpeg(scale) : decode_png();
}

RgbImage EncodedImage::decode_jpeg(double scale) const {
  // The header was read by the constructor; tjDecompress2 reads it again itself.
  tjhandle tj = jpeg_decompressor();
  // The smallest n/8 that keeps the requested share of the pixels: the DCT drops the high
  // frequencies a downscale would average away anyway.
  int num = 8;
  while (num > 1 && (num - 1) / 8.0 >= scale) --num;
  const tjscalingfactor factor{num, 8};
  RgbImage out;
  out.width = TJSCALED(static_cast<int>(width_), factor);
  out.height = TJSCALED(static_cast<int>(height_), factor);
  const bool cmyk = jpeg_colorspace_ == TJCS_CMYK || jpeg_colorspace_ == TJCS_YCCK;
  const int channels = cmyk ? 4 : 3;
  std::vector<uint8_t> decoded(static_cast<size_t>(out.width * out.height * channels));
  // A warning (a truncated file, a bad Huffman code) stops decoding: half an image is an error.
  const int flags = TJFLAG_STOPONWARNING;
  PAC_CHECK(tjDecompress2(tj, bytes_.data(), bytes_.size(), decoded.data(), out.width, 0,
                          out.height, cmyk ? TJPF_CMYK : TJPF_RGB, flags) == 0,
            "{}: a corrupt or truncated JPEG ({})", name_, tjGetErrorStr2(tj));
  if (!cmyk) {
    out.pixels = std::move(decoded);
    return out;
  }
  // CMYK JPEGs are written by Adobe's convention, inverted (255 means no ink); R = (1 - C)(1 - K)
  // in ink terms, as Pillow converts them.
  out.pixels.resize(static_cast<size_t>(out.width * out.height * 3));
  for (int64_t i = 0; i < out.width * out.height; ++i) {
    const uint8_t* p = decoded.data() + 4 * i;
    for (int c = 0; c < 3; ++c) {
      out.pixels[3 * i + c] = static_cast<uint8_t>((p[c] * p[3] + 127) / 255);
    }
  }
  return out;
}

RgbImage EncodedImage::decode_png() const {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  // libpng's simplified reader frees its own state on every failure it reports.
  auto fail = [&](const char* what) {
    const std::string message = image.message;
    png_image_free(&image);
    PAC_FAIL("{}: a corrupt or truncated PNG ({}: {})", name_, what, message);
  };
  if (!png_image_begin_read_from_memory(&image, bytes_.data(), bytes_.size())) fail("header");
  // RGBA, then the alpha dropped: what Pillow's convert("RGB") does (no compositing).
  image.format = PNG_FORMAT_RGBA;
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, rgba.data(), 0, nullptr)) fail("data");
  RgbImage out;
  out.width = image.width, out.height = image.height;
  out.pixels.resize(static_cast<size_t>(out.width * out.height * 3));
  for (int64_t i = 0; i < out.width * out.height; ++i) {
    std::memcpy(out.pixels.data() + 3 * i, rgba.data() + 4 * i, 3);
  }
  return out;
}

}  // namespace pac::data
