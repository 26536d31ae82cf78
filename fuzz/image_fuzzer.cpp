// Fuzz target: the image decoder and the transforms behind it. The input is one image file
// (JPEG or PNG); it is decoded whole and at a reduced scale, and a random crop of it resized as
// the training loader does. Any pac::Error is the decoder refusing a bad file; anything else (a
// crash, an out-of-bounds read in libjpeg-turbo's or libpng's hands or ours) is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "apps/data/image_decode.h"
#include "apps/data/image_transforms.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pac::data;
  try {
    const EncodedImage image(std::vector<uint8_t>(data, data + size), "fuzz-input");
    // Headers may claim huge sizes the data does not hold: decoding large ones only costs time.
    if (image.width() * image.height() > (int64_t{1} << 22)) return 0;
    for (double scale : {1.0, 0.3}) {
      const RgbImage rgb = image.decode(scale);
      pac::Generator g(size);
      const ResizeWindow crop = random_resized_crop(image.width(), image.height(), g);
      std::vector<float> out(3 * 16 * 16);
      resize_normalise(rgb, scale_window(crop, image.width(), image.height(), rgb), 16, true,
                       Normalisation{}, out.data());
    }
  } catch (const pac::Error&) {
  }
  return 0;
}
