#include "apps/data/idx.h"

#include <zlib.h>

#include <memory>

namespace pac::data {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

// Reads exactly n bytes at the current offset or throws with what was being read.
void read_exact(gzFile file, void* dst, size_t n, const std::string& path, int64_t offset,
                const char* what) {
  char* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    int got = gzread(file, out + done, chunk);
    if (got < 0) {
      int code;
      PAC_FAIL("{}: read error at byte {} ({}): {}", path, offset + done, what,
               gzerror(file, &code));
    }
    PAC_CHECK(got > 0, "{}: file ends at byte {} while reading {} ({} more bytes expected)", path,
              offset + done, what, n - done);
    done += static_cast<size_t>(got);
  }
}

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

}  // namespace

Tensor read_idx(const std::string& path) {
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  PAC_CHECK(file != nullptr, "{}: cannot open file", path);
  unsigned char magic[4];
  read_exact(file.get(), magic, 4, path, 0, "the magic number");
  PAC_CHECK(magic[0] == 0 && magic[1] == 0,
            "{}: bad magic number {:02x}{:02x}{:02x}{:02x}: not an IDX file (expected 0000 then "
            "type and rank)",
            path, magic[0], magic[1], magic[2], magic[3]);
  PAC_CHECK(magic[2] == 0x08, "{}: element type 0x{:02x}, expected 0x08 (unsigned byte)", path,
            magic[2]);
  int rank = magic[3];
  PAC_CHECK(rank >= 1 && rank <= 4, "{}: rank {} in the magic number, expected 1 to 4", path, rank);
  Shape shape(rank);
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    unsigned char b[4];
    read_exact(file.get(), b, 4, path, 4 + 4 * d, "a dimension");
    shape[d] = big_endian(b);
    PAC_CHECK(shape[d] > 0 && shape[d] < (int64_t{1} << 31),
              "{}: dimension {} is {}, expected a positive size", path, d, shape[d]);
    total *= shape[d];
    PAC_CHECK(total <= (int64_t{1} << 34), "{}: declared size {} is implausibly large", path,
              shape_str(shape));
  }
  int64_t header = 4 + 4 * rank;
  Tensor t = Tensor::empty(shape, DType::u8);
  read_exact(file.get(), t.raw_data(), static_cast<size_t>(total), path, header, "the elements");
  char extra;
  PAC_CHECK(gzread(file.get(), &extra, 1) == 0,
            "{}: data continues past the {} bytes that shape {} declares", path, header + total,
            shape_str(shape));
  return t;
}

}  // namespace pac::data
