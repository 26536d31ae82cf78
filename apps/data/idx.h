// The IDX format of MNIST and Fashion-MNIST: a big-endian magic number (0x0000, element type,
// rank), the dimensions, then the elements. Gzipped files are read transparently through zlib.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace pac::data {

// Reads an IDX file of unsigned bytes (type 0x08); returns a u8 tensor of the file's shape.
// Throws pac::Error naming the file, the byte offset and what was expected on any malformation.
Tensor read_idx(const std::string& path);

// The same from the file's bytes (gzipped or not); `name` is used in errors. Every size is
// checked against the bytes at hand before anything is allocated.
Tensor decode_idx(const std::vector<uint8_t>& bytes, const std::string& name);

}  // namespace pac::data
