// Reading a whole input file into memory, so that its parser can check every size against the
// bytes at hand before it allocates anything; and writing a file so that a crash at any moment
// leaves either the old file or the whole new one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pac {

// The whole file, refused if it is larger than `limit` bytes (reading it would only exhaust
// memory) or cannot be read.
std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t limit);

// Writes `path` all or nothing. The bytes go to "<path>.tmp.<pid>"; commit() syncs them to disk,
// renames the temporary over `path` and syncs the folder, so that the rename itself survives a
// power cut. Every failure (open, write, sync, close, rename) throws an error naming the file and
// the system's reason, and removes the temporary; so does destruction without commit(). The old
// `path` is untouched until the rename.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void commit();
  const std::string& temporary_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const std::string& what, int error);
  std::string path_, tmp_;
  int fd_ = -1;
};

// For the durability tests: after arm_sync_failure(), the next sync to disk fails as a full or
// broken disk makes it fail (EIO).
void arm_sync_failure();

}  // namespace pac
