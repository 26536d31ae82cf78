#include "comm/compressors/signsgd_kernels.h"
#include "core/cuda/launch.cuh"

namespace pac::comm::gpu {

using cuda::for_each;

void sign_pack(const float* p, const float* l1, int64_t n, uint8_t* message, float* residual) {
  // One thread per byte of signs, so no two threads write the same byte.
  const int64_t bytes = (n + 7) / 8;
  for_each(bytes, [=] __device__(int64_t byte) {
    const float scale = *l1 / static_cast<float>(n > 0 ? n : 1);
    if (byte == 0) memcpy(message, &scale, 4);
    uint8_t bits = 0;
    for (int b = 0; b < 8; ++b) {
      const int64_t i = 8 * byte + b;
      if (i >= n) break;
      const bool negative = p[i] < 0.0f;
      if (negative) bits |= static_cast<uint8_t>(1u << b);
      if (residual != nullptr) residual[i] = p[i] - (negative ? -scale : scale);
    }
    message[4 + byte] = bits;
  });
}

void sign_unpack(const uint8_t* messages, int64_t message_bytes, int world, int64_t n, float* out) {
  for_each(n, [=] __device__(int64_t i) {
    // The ranks in order, as the CPU sums them.
    float total = 0.0f;
    for (int r = 0; r < world; ++r) {
      const uint8_t* in = messages + r * message_bytes;
      float scale;
      memcpy(&scale, in, 4);
      const float share = scale / static_cast<float>(world);
      total += (in[4 + i / 8] >> (i % 8)) & 1u ? -share : share;
    }
    out[i] = total;
  });
}

}  // namespace pac::comm::gpu
