#include "core/dtype.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace pac {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i8:
      return 1;
    case DType::i16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
    case DType::f64:
      return 8;
  }
  PAC_FAIL("dtype_size: unknown dtype {}", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i8:
      return "i8";
    case DType::i16:
      return "i16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::f64:
      return "f64";
  }
  return "unknown";
}

static uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

static float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// Round-to-nearest-even conversion that handles subnormals, overflow to infinity, and NaN.
Half float_to_half(float value) {
  uint32_t f = float_bits(value);
  uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; keep NaN quiet
    return Half{static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (abs < 0x38800000u) {  // below the smallest normal half: produce a subnormal
    // Adding 0.5 shifts the value so that the float adder does the rounding for us.
    float magic = bits_float(abs) + 0.5f;
    return Half{static_cast<uint16_t>(sign | (float_bits(magic) - 0x3f000000u))};
  }
  uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return Half{static_cast<uint16_t>(sign | (abs >> 13))};
}

float half_to_float(Half value) {
  uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  uint32_t exponent = (value.bits >> 10) & 0x1fu;
  uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: value = mantissa * 2^-24
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

BFloat16 float_to_bf16(float value) {
  uint32_t f = float_bits(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((f >> 16) | 0x40u)};
  uint32_t rounding = 0x7fffu + ((f >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>((f + rounding) >> 16)};
}

float bf16_to_float(BFloat16 value) { return bits_float(static_cast<uint32_t>(value.bits) << 16); }

}  // namespace pac
