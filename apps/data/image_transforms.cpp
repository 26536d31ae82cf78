#include "apps/data/image_transforms.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace pac::data {

namespace {

// Uniform in [a, b) at double precision, as torch's uniform_ draws.
double uniform(Generator& g, double a, double b) {
  return a + (b - a) * static_cast<double>(g.next_u64() >> 11) * 0x1.0p-53;
}

ResizeWindow crop_window(int64_t x, int64_t y, int64_t width, int64_t height) {
  // torchvision crops first, so the filter sees only the crop.
  return {static_cast<double>(x),
          static_cast<double>(y),
          static_cast<double>(width),
          static_cast<double>(height),
          x,
          y,
          x + width,
          y + height};
}

// One axis of a resize: for each output pixel, the first input pixel it reads, how many, and
// their weights. Pillow's bilinear filter: a triangle as wide as the downscale, so that every
// input pixel contributes (no aliasing), cut to [lo, hi) and renormalised there.
struct Taps {
  std::vector<int64_t> first, count;
  std::vector<float> weights;  // (out, stride)
  int64_t stride = 0;
};

Taps filter_taps(double box0, double box_length, int64_t out, int64_t lo, int64_t hi) {
  const double scale = box_length / static_cast<double>(out);
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // the triangle's support is 1 at scale 1
  Taps t;
  t.stride = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out), t.count.resize(out);
  t.weights.assign(static_cast<size_t>(out * t.stride), 0.0f);
  for (int64_t i = 0; i < out; ++i) {
    const double center = box0 + (static_cast<double>(i) + 0.5) * scale;
    // Truncation as Pillow's (int) casts; a negative start is clamped to lo anyway.
    int64_t first = std::max(static_cast<int64_t>(center - support + 0.5), lo);
    int64_t last = std::min(static_cast<int64_t>(center + support + 0.5), hi);
    if (last <= first) first = std::clamp<int64_t>(first, lo, hi - 1), last = first + 1;
    last = std::min(last, first + t.stride);
    double total = 0.0;
    float* w = t.weights.data() + i * t.stride;
    for (int64_t x = first; x < last; ++x) {
      const double d = std::abs((static_cast<double>(x) - center + 0.5) / filter_scale);
      w[x - first] = static_cast<float>(d < 1.0 ? 1.0 - d : 0.0);
      total += w[x - first];
    }
    for (int64_t k = 0; k < last - first; ++k)
      w[k] = total > 0 ? w[k] / total : 1.0f / (last - first);
    t.first[i] = first, t.count[i] = last - first;
  }
  return t;
}

uint8_t to_level(float v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

}  // namespace

ResizeWindow random_resized_crop(int64_t width, int64_t height, Generator& g,
                                 const CropRange& range) {
  const double area = static_cast<double>(width * height);
  const double log_min = std::log(range.min_ratio), log_max = std::log(range.max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * uniform(g, range.min_scale, range.max_scale);
    const double ratio = std::exp(uniform(g, log_min, log_max));
    const int64_t w = std::llround(std::sqrt(target * ratio));
    const int64_t h = std::llround(std::sqrt(target / ratio));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t y = static_cast<int64_t>(g.below(static_cast<uint64_t>(height - h + 1)));
      const int64_t x = static_cast<int64_t>(g.below(static_cast<uint64_t>(width - w + 1)));
      return crop_window(x, y, w, h);
    }
  }
  // The centre crop of the allowed ratio nearest the image's.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < range.min_ratio) {
    h = std::llround(static_cast<double>(w) / range.min_ratio);
  } else if (in_ratio > range.max_ratio) {
    w = std::llround(static_cast<double>(h) * range.max_ratio);
  }
  return crop_window((width - w) / 2, (height - h) / 2, w, h);
}

ResizeWindow resize_center_crop(int64_t width, int64_t height, int64_t resize, int64_t size) {
  PAC_CHECK(resize >= size && size > 0,
            "resize {} then centre crop {}: expected 0 < crop <= resize", resize, size);
  // Resize: the shorter side becomes `resize`, the longer keeps the ratio (rounded down).
  const bool wide = width >= height;
  const int64_t short_side = wide ? height : width, long_side = wide ? width : height;
  const int64_t new_long = resize * long_side / short_side;
  const int64_t new_w = wide ? new_long : resize, new_h = wide ? resize : new_long;
  // CenterCrop: offsets rounded half to even, as Python's round().
  const int64_t left = static_cast<int64_t>(std::nearbyint((new_w - size) / 2.0));
  const int64_t top = static_cast<int64_t>(std::nearbyint((new_h - size) / 2.0));
  const double sx = static_cast<double>(width) / static_cast<double>(new_w);
  const double sy = static_cast<double>(height) / static_cast<double>(new_h);
  return {left * sx, top * sy, size * sx, size * sy, 0, 0, width, height};
}

ResizeWindow scale_window(const ResizeWindow& w, int64_t width, int64_t height,
                          const RgbImage& decoded) {
  if (decoded.width == width && decoded.height == height) return w;
  const double fx = static_cast<double>(decoded.width) / static_cast<double>(width);
  const double fy = static_cast<double>(decoded.height) / static_cast<double>(height);
  ResizeWindow out{w.x * fx, w.y * fy, w.width * fx, w.height * fy};
  out.bounds_x0 = static_cast<int64_t>(std::floor(w.bounds_x0 * fx));
  out.bounds_y0 = static_cast<int64_t>(std::floor(w.bounds_y0 * fy));
  out.bounds_x1 = std::min(decoded.width, static_cast<int64_t>(std::ceil(w.bounds_x1 * fx)));
  out.bounds_y1 = std::min(decoded.height, static_cast<int64_t>(std::ceil(w.bounds_y1 * fy)));
  return out;
}

double needed_scale(const ResizeWindow& window, int64_t out_size) {
  const double need = static_cast<double>(out_size) / std::min(window.width, window.height);
  return std::min(1.0, need);
}

void resize_normalise(const RgbImage& image, const ResizeWindow& window, int64_t out_size,
                      bool flip, const Normalisation& norm, float* out) {
  PAC_CHECK(window.bounds_x0 >= 0 && window.bounds_x1 <= image.width && window.bounds_y0 >= 0 &&
                window.bounds_y1 <= image.height && window.bounds_x0 < window.bounds_x1 &&
                window.bounds_y0 < window.bounds_y1,
            "resize: bounds [{}, {}) x [{}, {}) are not inside a {}x{} image", window.bounds_x0,
            window.bounds_x1, window.bounds_y0, window.bounds_y1, image.width, image.height);
  const int64_t n = out_size;
  const Taps tx = filter_taps(window.x, window.width, n, window.bounds_x0, window.bounds_x1);
  const Taps ty = filter_taps(window.y, window.height, n, window.bounds_y0, window.bounds_y1);
  // Horizontal pass over the rows the vertical one reads, rounded to 8-bit levels as Pillow's
  // intermediate image is: rows (y1 - y0, n, 3).
  const int64_t y0 = ty.first.front(), y1 = ty.first.back() + ty.count.back();
  std::vector<uint8_t> rows(static_cast<size_t>((y1 - y0) * n * 3));
  for (int64_t y = y0; y < y1; ++y) {
    const uint8_t* src = image.pixels.data() + y * image.width * 3;
    uint8_t* dst = rows.data() + (y - y0) * n * 3;
    for (int64_t i = 0; i < n; ++i) {
      const float* w = tx.weights.data() + i * tx.stride;
      const uint8_t* p = src + tx.first[i] * 3;
      float r = 0, g = 0, b = 0;
      for (int64_t k = 0; k < tx.count[i]; ++k) {
        r += w[k] * p[3 * k], g += w[k] * p[3 * k + 1], b += w[k] * p[3 * k + 2];
      }
      uint8_t* d = dst + (flip ? n - 1 - i : i) * 3;
      d[0] = to_level(r), d[1] = to_level(g), d[2] = to_level(b);
    }
  }
  // Vertical pass into normalised planes: (v / 255 - mean) / std.
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * norm.std[c]);
    shift[c] = norm.mean[c] / norm.std[c];
  }
  std::vector<float> sums(static_cast<size_t>(n * 3));
  for (int64_t j = 0; j < n; ++j) {
    std::fill(sums.begin(), sums.end(), 0.0f);
    const float* w = ty.weights.data() + j * ty.stride;
    for (int64_t k = 0; k < ty.count[j]; ++k) {
      const uint8_t* row = rows.data() + (ty.first[j] + k - y0) * n * 3;
      for (int64_t i = 0; i < n * 3; ++i) sums[i] += w[k] * row[i];
    }
    for (int c = 0; c < 3; ++c) {
      float* plane = out + c * n * n + j * n;
      for (int64_t i = 0; i < n; ++i) plane[i] = to_level(sums[i * 3 + c]) * scale[c] - shift[c];
    }
  }
}

}  // namespace pac::data
