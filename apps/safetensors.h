// The safetensors format: an 8-byte little-endian header length, a JSON header mapping each
// tensor name to {dtype, shape, data_offsets} (plus an optional "__metadata__" of strings), then
// the raw little-endian tensor bytes. PyTorch's `safetensors` package reads these files as they
// are. Writes are atomic (temporary file, then rename); reads check every size and offset
// against the file before using it.
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"

namespace pac {

struct TensorFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

void save_safetensors(const std::string& path, const TensorFile& file);
TensorFile load_safetensors(const std::string& path);
// The same from the file's bytes; `name` is used in errors.
TensorFile parse_safetensors(const uint8_t* bytes, size_t size, const std::string& name);

}  // namespace pac
