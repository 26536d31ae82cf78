#include "apps/file_io.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace pac {

std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t limit) {
  std::error_code ec;
  PAC_CHECK(std::filesystem::is_regular_file(path, ec), "{}: cannot open file (no such file)",
            path);
  uint64_t size = std::filesystem::file_size(path, ec);
  PAC_CHECK(!ec, "{}: cannot open file: {}", path, ec.message());
  PAC_CHECK(size <= limit, "{}: {} bytes is more than the {} accepted for this kind of file", path,
            size, limit);
  std::vector<uint8_t> bytes(size);
  std::ifstream in(path, std::ios::binary);
  PAC_CHECK(in.good(), "{}: cannot open file", path);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  PAC_CHECK(in.gcount() == static_cast<std::streamsize>(size), "{}: read {} of its {} bytes", path,
            in.gcount(), size);
  return bytes;
}

}  // namespace pac
