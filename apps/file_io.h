// Reading a whole input file into memory, so that its parser can check every size against the
// bytes at hand before it allocates anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pac {

// The whole file, refused if it is larger than `limit` bytes (reading it would only exhaust
// memory) or cannot be read.
std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t limit);

}  // namespace pac
