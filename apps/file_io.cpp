#include "apps/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

namespace {

bool sync_failure_armed = false;

// fsync, or the armed failure.
int sync_to_disk(int fd) {
  if (sync_failure_armed) {
    sync_failure_armed = false;
    errno = EIO;
    return -1;
  }
  return ::fsync(fd);
}

}  // namespace

void arm_sync_failure() { sync_failure_armed = true; }

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  PAC_CHECK(fd_ >= 0, "{}: cannot open for writing: {}", tmp_, std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::fail(const std::string& what, int error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  tmp_.clear();
  PAC_FAIL("{}: {}: {}; the previous file, if any, is unchanged", path_, what,
           std::strerror(error));
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  PAC_CHECK(fd_ >= 0, "{}: write after the file was committed or failed", path_);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("writing failed", errno);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  PAC_CHECK(fd_ >= 0, "{}: committed twice or after a failure", path_);
  if (sync_to_disk(fd_) != 0) fail("cannot sync the new file to disk", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("closing the new file failed", errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot replace with the new file", errno);
  tmp_.clear();
  // The rename is an entry in the folder; until the folder is synced a crash can undo it.
  std::filesystem::path target(path_);
  std::string folder = target.has_parent_path() ? target.parent_path().string() : ".";
  int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  PAC_CHECK(dir >= 0, "{}: written, but its folder cannot be opened to sync the rename: {}", path_,
            std::strerror(errno));
  int synced = sync_to_disk(dir), error = errno;
  ::close(dir);
  PAC_CHECK(synced == 0, "{}: written, but syncing its folder failed: {}", path_,
            std::strerror(error));
}

}  // namespace pac
