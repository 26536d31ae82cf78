// Decoding one image file (JPEG through libjpeg-turbo, PNG through libpng) to RGB bytes, as
// Pillow's open(...).convert("RGB") does: greyscale and palette images are expanded, CMYK JPEGs
// converted, an alpha channel dropped. A JPEG decodes at a reduced DCT scale (1/8 to 8/8) when
// the caller needs fewer pixels than the file has, which is most of the cost saved on large
// photographs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pac::data {

// RGB pixels, rows top to bottom: (height, width, 3) bytes.
struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;
};

// An image file held in memory. The constructor reads the header only; a file that is neither a
// JPEG nor a PNG, or whose header is broken, is an error naming `name`.
class EncodedImage {
 public:
  EncodedImage(std::vector<uint8_t> bytes, std::string name);

  int64_t width() const { return width_; }
  int64_t height() const { return height_; }
  bool is_jpeg() const { return jpeg_; }
  const std::string& name() const { return name_; }

  // The whole image, at the smallest size its format can decode to that keeps both sides at
  // least `scale` of the full ones (0 < scale <= 1): a JPEG picks the smallest DCT scale n/8
  // >= scale, a PNG always decodes whole. A truncated or corrupt file is an error naming it.
  RgbImage decode(double scale = 1.0) const;

 private:
  RgbImage decode_jpeg(double scale) const;
  RgbImage decode_png() const;

  std::vector<uint8_t> bytes_;
  std::string name_;
  bool jpeg_ = false;
  int jpeg_colorspace_ = 0;  // TJCS_*: CMYK and YCCK decode to CMYK, the rest to RGB
  int64_t width_ = 0, height_ = 0;
};

// True when `path` names a file the decoder reads, by its extension (.jpg, .jpeg, .png in any
// case), as torchvision's ImageFolder filters by extension.
bool has_image_extension(const std::string& path);

}  // namespace pac::data
