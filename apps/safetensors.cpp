#include "apps/safetensors.h"

#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "apps/faults.h"
#include "apps/file_io.h"

namespace pac {

namespace {

const char* const kChecksumKey = "pactrain.crc32";

const char* format_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i8:
      return "I8";
    case DType::i16:
      return "I16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
    case DType::f64:
      return "F64";
  }
  return "?";
}

DType parse_dtype(const std::string& name, const std::string& path, const std::string& tensor) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i8, DType::i16, DType::i32,
                  DType::i64, DType::u8, DType::f64}) {
    if (name == format_name(d)) return d;
  }
  PAC_FAIL(
      "{}: tensor '{}' has dtype '{}', expected one of F32, F16, BF16, I8, I16, I32, I64, U8, F64",
      path, tensor, name);
}

}  // namespace

// A writer killed in the middle of a file leaves its "<path>.tmp.<pid>" behind. After a successful
// save, those whose process no longer exists are removed; a live writer's are left alone.
static void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (::kill(pid, 0) == -1 && errno == ESRCH) fs::remove(entry.path(), ec);
  }
}

void save_safetensors(const std::string& path, const TensorFile& gpu_or_host) {
  // GPU tensors are written from host copies.
  TensorFile file = gpu_or_host;
  for (auto& [name, t] : file.tensors) t = t.cpu();
  nlohmann::json header = nlohmann::json::object();
  // A CRC-32 of the data section, so a damaged file is refused on load instead of read as weights.
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const auto& [name, t] : file.tensors) {
    // zlib restarts the checksum when given no buffer, which an empty tensor's data may be.
    if (t.nbytes() > 0) crc = crc32_z(crc, static_cast<const Bytef*>(t.raw_data()), t.nbytes());
  }
  std::map<std::string, std::string> metadata = file.metadata;
  metadata[kChecksumKey] = fmt::format("{:08x}", static_cast<uint32_t>(crc));
  header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : file.tensors) {  // std::map: sorted names, a stable layout
    PAC_CHECK(name != "__metadata__", "{}: '__metadata__' cannot name a tensor", path);
    header[name] = {{"dtype", format_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  uint64_t length = text.size();

  AtomicFileWriter out(path);
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(length >> (8 * i));
  out.write(le, 8);
  out.write(text.data(), text.size());
  size_t written = 0;
  for (const auto& [name, t] : file.tensors) {
    out.write(t.raw_data(), t.nbytes());
    if (++written == file.tensors.size() / 2) {
      checkpoint_write_halfway();  // fault injection; nothing unless a test armed it
    }
  }
  out.commit();
  remove_stale_temporaries(path);
}

TensorFile load_safetensors(const std::string& path) {
  // A checkpoint of up to 64 GiB; the header alone is capped at 100 MiB below.
  std::vector<uint8_t> bytes = read_file_bytes(path, uint64_t{1} << 36);
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

TensorFile parse_safetensors(const uint8_t* bytes, size_t file_size, const std::string& path) {
  PAC_CHECK(file_size >= 8,
            "{}: {} bytes is too short for a safetensors file (8-byte header length expected)",
            path, file_size);
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  PAC_CHECK(length <= file_size - 8 && length <= (uint64_t{100} << 20),
            "{}: header length {} at offset 0 does not fit in the {}-byte file", path, length,
            file_size);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + length);
  } catch (const nlohmann::json::exception& e) {
    PAC_FAIL("{}: header at offset 8 is not valid JSON: {}", path, e.what());
  }
  PAC_CHECK(header.is_object(), "{}: header must be a JSON object", path);

  TensorFile out;
  // Every entry is read and the extents checked against each other before any tensor is
  // allocated: entries that overlap could otherwise claim the data section many times over.
  struct Extent {
    uint64_t begin, end;
    std::string name;
    DType dtype;
    Shape shape;
  };
  std::vector<Extent> extents;
  const uint8_t* data = bytes + 8 + length;
  const uint64_t data_size = file_size - 8 - length;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      PAC_CHECK(entry.is_object(), "{}: __metadata__ must be an object of strings", path);
      for (auto& [key, value] : entry.items()) {
        PAC_CHECK(value.is_string(), "{}: metadata '{}' is not a string", path, key);
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    try {
      PAC_CHECK(entry.is_object(),
                "{}: tensor '{}' must be an object with dtype, shape and "
                "data_offsets",
                path, name);
      DType dtype = parse_dtype(entry.at("dtype").get<std::string>(), path, name);
      PAC_CHECK(entry.at("shape").is_array() && entry.at("shape").size() <= 8,
                "{}: tensor '{}' needs a shape of at most 8 dimensions", path, name);
      Shape shape;
      for (const auto& d : entry.at("shape")) {
        PAC_CHECK(d.is_number_integer(), "{}: tensor '{}' has a dimension that is not an integer",
                  path, name);
        shape.push_back(d.get<int64_t>());
      }
      // Read as integers only: converting a number like 1e24 to an integer is undefined.
      std::vector<uint64_t> offsets;
      for (const auto& o : entry.at("data_offsets")) {
        PAC_CHECK(o.is_number_unsigned(),
                  "{}: tensor '{}' has a data offset that is not a non-negative integer", path,
                  name);
        offsets.push_back(o.get<uint64_t>());
      }
      PAC_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size,
                "{}: tensor '{}' has data offsets outside the {} data bytes", path, name,
                data_size);
      // The byte count, with every product checked for overflow (a wrapped count could match
      // the offsets and allocate too little).
      uint64_t expected = dtype_size(dtype);
      for (int64_t d : shape) {
        PAC_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension", path, name);
        PAC_CHECK(
            d == 0 || static_cast<uint64_t>(d) <= UINT64_MAX / std::max<uint64_t>(expected, 1),
            "{}: tensor '{}' has shape {}, too large for any file", path, name, shape_str(shape));
        expected *= static_cast<uint64_t>(d);
      }
      PAC_CHECK(offsets[1] - offsets[0] == expected,
                "{}: tensor '{}' of shape {} needs {} bytes, its offsets span {}", path, name,
                shape_str(shape), expected, offsets[1] - offsets[0]);
      extents.push_back({offsets[0], offsets[1], name, dtype, shape});
    } catch (const nlohmann::json::exception& e) {
      PAC_FAIL("{}: tensor '{}' has a malformed header entry: {}", path, name, e.what());
    }
  }
  // The tensors must tile the data section exactly: no gap, no overlap, nothing after.
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const auto& e : extents) {
    PAC_CHECK(e.begin == at,
              "{}: tensor '{}' starts at data byte {}, expected {} (overlapping tensors or a gap)",
              path, e.name, e.begin, at);
    at = e.end;
  }
  PAC_CHECK(at == data_size,
            "{}: tensors cover {} of the {} data bytes (overlapping or trailing data)", path, at,
            data_size);
  for (const auto& e : extents) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.raw_data(), data + e.begin, e.end - e.begin);
    out.tensors[e.name] = t;
  }
  auto stored = out.metadata.find(kChecksumKey);
  if (stored != out.metadata.end()) {  // files from other tools have none
    std::string actual = fmt::format(
        "{:08x}", static_cast<uint32_t>(crc32_z(crc32(0L, Z_NULL, 0), data, data_size)));
    PAC_CHECK(actual == stored->second,
              "{}: the data section's CRC-32 is {}, the header says {}: the file is damaged", path,
              actual, stored->second);
    out.metadata.erase(stored);
  }
  return out;
}

}  // namespace pac
