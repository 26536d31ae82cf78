// DType: the element types a Tensor can store. f32 is the compute type; the others are storage
// types for masks (u8), indices (i32, i64), labels, gradient wire encodings (f16, bf16, i8, i16)
// and values whose range f32 cannot hold (f64: pruning scores that are products over many
// layers). Conversions between them go through double.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pac {

enum class DType : uint8_t { f32, f16, bf16, i8, i32, i64, u8, i16, f64 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

// IEEE 754 binary16, stored as raw bits; converted to float for any arithmetic.
struct Half {
  uint16_t bits = 0;
};
// bfloat16: the top 16 bits of a float, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
};

Half float_to_half(float value);
float half_to_float(Half value);
BFloat16 float_to_bf16(float value);
float bf16_to_float(BFloat16 value);

// dtype_of<T>: the DType tag of a C++ element type, so Tensor::data<T>() can check it.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int8_t>() {
  return DType::i8;
}
template <>
constexpr DType dtype_of<int16_t>() {
  return DType::i16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

}  // namespace pac
