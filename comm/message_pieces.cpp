#include "comm/message_pieces.h"

#include <algorithm>
#include <cstring>

#include "comm/host_reduce.h"
#include "comm/packed_fields.h"

namespace pac::comm {

int64_t Piece::most_wire_bytes() const {
  if (coded) return coded_bytes_bound(values, largest);
  if (narrowed()) return 8 * packed_words(values, wire_bits);
  return stored_bytes();
}

Piece whole_piece(ReduceSegment& s) {
  Piece p{static_cast<char*>(s.tensor.raw_data()), s.tensor.numel(), s.tensor.dtype(), s.op,
          s.purpose};
  p.values = s.packed.values;
  p.bits = s.packed.bits;
  p.rank_max = s.packed.rank_max;
  p.wire_bits = s.packed.bits;
  return p;
}

std::vector<Piece> chunk_pieces(std::vector<ReduceSegment>& segments, int c, int ranks) {
  std::vector<Piece> pieces;
  for (auto& s : segments) {
    const int64_t n = s.tensor.numel(), begin = n * c / ranks, end = n * (c + 1) / ranks;
    Piece piece = whole_piece(s);
    piece.data += begin * static_cast<int64_t>(dtype_size(s.tensor.dtype()));
    piece.count = end - begin;
    if (piece.values > 0) {
      const int64_t per_word = fields_per_word(piece.bits);
      piece.values =
          std::max<int64_t>(0, std::min(end * per_word, s.packed.values) - begin * per_word);
    }
    pieces.push_back(piece);
  }
  return pieces;
}

std::vector<Piece> travelling(std::vector<Piece> pieces, int summed, int ranks, PackedWire wire) {
  for (auto& p : pieces) {
    if (p.values == 0) continue;
    p.largest = std::min(summed, ranks) * p.rank_max;
    p.wire_bits = summed < ranks ? bits_for(p.largest) : p.bits;
    p.coded = wire == PackedWire::coded;
  }
  return pieces;
}

int64_t most_wire_bytes(const std::vector<Piece>& pieces) {
  int64_t n = 0;
  for (const auto& p : pieces) n += p.most_wire_bytes();
  return n;
}

bool any_coded(const std::vector<Piece>& pieces) {
  return std::any_of(pieces.begin(), pieces.end(), [](const Piece& p) { return p.coded; });
}

Outgoing pack_pieces(const std::vector<Piece>& pieces, std::vector<char>& buffer) {
  Outgoing out{nullptr, 0, {}};
  if (pieces.size() == 1 && !pieces.front().coded && !pieces.front().narrowed()) {
    out.data = pieces.front().data;
    out.bytes = pieces.front().stored_bytes();
    out.piece_bytes = {out.bytes};
    return out;
  }
  buffer.resize(std::max(buffer.size(), static_cast<size_t>(most_wire_bytes(pieces))));
  char* at = buffer.data();
  for (const auto& p : pieces) {
    int64_t n = p.most_wire_bytes();
    if (p.coded) {
      n = encode_fields(p.data, p.bits, p.values, p.largest, at);
    } else if (p.narrowed()) {
      repack_fields(p.data, p.bits, p.values, at, p.wire_bits);
    } else {
      std::memcpy(at, p.data, n);
    }
    out.piece_bytes.push_back(n);
    at += n;
  }
  out.data = buffer.data();
  out.bytes = at - buffer.data();
  return out;
}

void unpack_pieces(const std::vector<Piece>& pieces, const char* incoming, int64_t bytes,
                   Arrival how) {
  int64_t at = 0;
  for (const auto& p : pieces) {
    const char* in = incoming + at;
    if (p.coded) {
      at += decode_fields(in, bytes - at, p.values, p.largest, p.data, p.bits, how);
      continue;
    }
    const int64_t n = p.most_wire_bytes();
    PAC_CHECK(at + n <= bytes, "a message of {} bytes ends inside its piece at byte {}", bytes, at);
    if (p.narrowed()) {
      if (how == Arrival::add) {
        add_fields(p.data, p.bits, in, p.wire_bits, p.values);
      } else {
        repack_fields(in, p.wire_bits, p.values, p.data, p.bits);
      }
    } else if (how == Arrival::add) {
      reduce_into(p.data, in, p.count, p.dtype, p.op == ReduceOp::avg ? ReduceOp::sum : p.op);
    } else {
      std::memcpy(p.data, in, n);
    }
    at += n;
  }
  PAC_CHECK(at == bytes,
            "a message of {} bytes holds {} bytes of pieces: the ranks' collectives do not match",
            bytes, at);
}

}  // namespace pac::comm
