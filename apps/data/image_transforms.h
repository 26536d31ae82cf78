// torchvision's ImageNet transforms on a decoded image, as small functions of an image and a
// generator: training takes RandomResizedCrop(S) and a horizontal flip, evaluation Resize(S *
// 256 / 224) then CenterCrop(S); both end in ToTensor and Normalize. The boxes are torchvision's
// integer arithmetic, the resize Pillow's antialiased bilinear filter (its support widens with
// the downscale), so a batch matches torchvision's to the rounding of one 8-bit level.
#pragma once

#include <array>
#include <cstdint>

#include "apps/data/image_decode.h"
#include "core/generator.h"

namespace pac::data {

// A window of an image in pixels: the box a crop-and-resize reads, and the pixels its filter may
// touch (`bounds`: the crop itself when torchvision crops before it resizes, the whole image when
// it resizes before it crops).
struct ResizeWindow {
  double x = 0, y = 0, width = 0, height = 0;  // the box, mapped onto the output
  int64_t bounds_x0 = 0, bounds_y0 = 0, bounds_x1 = 0, bounds_y1 = 0;
};

struct CropRange {
  double min_scale = 0.08, max_scale = 1.0;             // of the image's area
  double min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;  // width / height
};

// RandomResizedCrop's box for a width x height image: ten tries at a random area share and a
// log-uniform aspect ratio, else the centre crop of the nearest allowed ratio.
ResizeWindow random_resized_crop(int64_t width, int64_t height, Generator& g,
                                 const CropRange& range = {});
// Resize(resize) of the shorter side, then CenterCrop(size), as one window of the original.
ResizeWindow resize_center_crop(int64_t width, int64_t height, int64_t resize, int64_t size);
// The same window on the image decoded at a reduced scale (`decoded` of a width x height file).
ResizeWindow scale_window(const ResizeWindow& window, int64_t width, int64_t height,
                          const RgbImage& decoded);
// How much of the window's resolution the output needs: a JPEG may decode at this scale.
double needed_scale(const ResizeWindow& window, int64_t out_size);

struct Normalisation {
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};  // ImageNet's, on the [0, 1] scale
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
};

// Resamples the window to out_size x out_size (mirrored with `flip`), rounds to 8-bit levels as
// Pillow does, normalises, and writes planes: out (3, out_size, out_size).
void resize_normalise(const RgbImage& image, const ResizeWindow& window, int64_t out_size,
                      bool flip, const Normalisation& norm, float* out);

}  // namespace pac::data
