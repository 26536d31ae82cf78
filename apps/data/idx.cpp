#include "apps/data/idx.h"

#include "apps/file_io.h"

#include <zlib.h>

#include <cstring>

namespace pac::data {

namespace {

// The largest data file accepted, compressed or not, and the largest element count: 16 GiB.
constexpr uint64_t kMaxBytes = uint64_t{1} << 34;

uint32_t big_endian(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

struct Inflater {
  z_stream z{};
  ~Inflater() { inflateEnd(&z); }
};

// Inflates gzip data (one member or several, as gzip allows) into memory, at most kMaxBytes.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& name) {
  PAC_CHECK(in.size() <= UINT32_MAX, "{}: {} compressed bytes; at most 4 GiB are read", name,
            in.size());
  Inflater inflater;
  z_stream& z = inflater.z;
  PAC_CHECK(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK, "{}: cannot start zlib", name);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  std::vector<uint8_t> out(std::max<size_t>(in.size() * 2, 4096));
  size_t produced = 0;
  while (true) {
    if (produced == out.size()) {
      PAC_CHECK(out.size() < kMaxBytes, "{}: decompresses to more than {} bytes; not a data file",
                name, kMaxBytes);
      out.resize(std::min<uint64_t>(uint64_t{out.size()} * 2, kMaxBytes));
    }
    uInt room = static_cast<uInt>(std::min<size_t>(out.size() - produced, UINT32_MAX));
    z.next_out = out.data() + produced;
    z.avail_out = room;
    int status = inflate(&z, Z_NO_FLUSH);
    produced += room - z.avail_out;
    size_t at = in.size() - z.avail_in;  // compressed bytes consumed so far
    if (status == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      PAC_CHECK(z.avail_in >= 2 && in[at] == 0x1f && in[at + 1] == 0x8b,
                "{}: {} bytes of something else follow the gzip data at byte {}", name, z.avail_in,
                at);
      PAC_CHECK(inflateReset(&z) == Z_OK, "{}: cannot restart zlib", name);
      continue;
    }
    if (status == Z_BUF_ERROR && z.avail_in == 0) {
      PAC_FAIL("{}: the gzip data ends early, at byte {} (a truncated download?)", name, at);
    }
    PAC_CHECK(status == Z_OK || status == Z_BUF_ERROR, "{}: corrupt gzip data near byte {}: {}",
              name, at, z.msg ? z.msg : "zlib error");
  }
  out.resize(produced);
  return out;
}

}  // namespace

Tensor decode_idx(const std::vector<uint8_t>& file_bytes, const std::string& name) {
  const bool gzipped = file_bytes.size() >= 2 && file_bytes[0] == 0x1f && file_bytes[1] == 0x8b;
  std::vector<uint8_t> inflated;
  if (gzipped) inflated = gunzip(file_bytes, name);
  const std::vector<uint8_t>& bytes = gzipped ? inflated : file_bytes;
  // Offsets in messages are in the decompressed data, as for the uncompressed file.
  auto need = [&](uint64_t offset, uint64_t n, const char* what) {
    PAC_CHECK(offset + n <= bytes.size(),
              "{}: file ends at byte {} while reading {} ({} more bytes expected)", name,
              bytes.size(), what, offset + n - bytes.size());
  };
  need(0, 4, "the magic number");
  const uint8_t* magic = bytes.data();
  PAC_CHECK(magic[0] == 0 && magic[1] == 0,
            "{}: bad magic number {:02x}{:02x}{:02x}{:02x}: not an IDX file (expected 0000 then "
            "type and rank)",
            name, magic[0], magic[1], magic[2], magic[3]);
  PAC_CHECK(magic[2] == 0x08, "{}: element type 0x{:02x}, expected 0x08 (unsigned byte)", name,
            magic[2]);
  int rank = magic[3];
  PAC_CHECK(rank >= 1 && rank <= 4, "{}: rank {} in the magic number, expected 1 to 4", name, rank);
  Shape shape(rank);
  uint64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    need(4 + 4 * d, 4, "a dimension");
    shape[d] = big_endian(bytes.data() + 4 + 4 * d);
    PAC_CHECK(shape[d] > 0 && shape[d] < (int64_t{1} << 31),
              "{}: dimension {} at byte {} is {}, expected a positive size", name, d, 4 + 4 * d,
              shape[d]);
    PAC_CHECK(static_cast<uint64_t>(shape[d]) <= kMaxBytes / total,
              "{}: declared size {} is implausibly large", name, shape_str(shape));
    total *= static_cast<uint64_t>(shape[d]);
  }
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(rank);
  need(header, total, "the elements");
  PAC_CHECK(header + total == bytes.size(),
            "{}: data continues past the {} bytes that shape {} declares ({} bytes in all)", name,
            header + total, shape_str(shape), bytes.size());
  Tensor t = Tensor::empty(shape, DType::u8);
  std::memcpy(t.raw_data(), bytes.data() + header, total);
  return t;
}

Tensor read_idx(const std::string& path) {
  return decode_idx(read_file_bytes(path, kMaxBytes), path);
}

}  // namespace pac::data
