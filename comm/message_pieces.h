// The messages of the MPI group's all-reduces, piece by piece. A coalesced all-reduce sends its
// segments together: each message carries one piece of every segment (a ring chunk of it, or all
// of it for recursive doubling), back to back. A piece of packed fields (ReduceSegment::packed)
// travels in the form the sums it holds so far need: while it holds the sums of k ranks, every
// field is at most k x rank_max, so it goes in fields that narrow, or coded (comm/coded_fields.h)
// when the group's PackedWire says so.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/coded_fields.h"
#include "comm/process_group.h"

namespace pac::comm {

struct Piece {
  char* data;
  int64_t count;  // elements
  DType dtype;
  ReduceOp op;
  const char* purpose;  // the segment's, for bytes_sent_for
  // Packed fields: how many this run holds (from its first word on), their width in memory, and
  // the most one rank adds to a field.
  int64_t values = 0;
  int bits = 0;
  int64_t rank_max = 0;
  // How the fields travel now (set by travelling()): the largest sum they hold, the width that
  // needs, and whether they are coded.
  int64_t largest = 0;
  int wire_bits = 0;
  bool coded = false;

  int64_t stored_bytes() const { return count * static_cast<int64_t>(dtype_size(dtype)); }
  bool narrowed() const { return !coded && values > 0 && wire_bits < bits; }
  // The bytes it takes in a message: exactly, unless it is coded; then at most.
  int64_t most_wire_bytes() const;
};

// A whole segment as one piece, as it is stored.
Piece whole_piece(ReduceSegment& s);
// Ring chunk c of every segment, of `ranks` chunks: each segment is split into nearly equal chunks
// of its own, so one segment splits exactly as a plain all-reduce of it does. Packed fields are
// split at words.
std::vector<Piece> chunk_pieces(std::vector<ReduceSegment>& segments, int c, int ranks);
// The pieces as they travel while they hold the sums of `summed` of the `ranks` ranks.
std::vector<Piece> travelling(std::vector<Piece> pieces, int summed, int ranks, PackedWire wire);
int64_t most_wire_bytes(const std::vector<Piece>& pieces);
bool any_coded(const std::vector<Piece>& pieces);

// A message ready to send, and what each piece took of it (for bytes_sent_for).
struct Outgoing {
  const char* data;
  int64_t bytes;
  std::vector<int64_t> piece_bytes;
};
// The pieces as one contiguous message: the piece itself when it is alone and goes as it is
// stored, else written into `buffer` (kept by the caller across messages).
Outgoing pack_pieces(const std::vector<Piece>& pieces, std::vector<char>& buffer);
// Each piece op= (Arrival::add) or = (Arrival::replace) its part of `incoming`, a message of
// `bytes` laid out as pack_pieces lays out these pieces; a message of another length is refused.
void unpack_pieces(const std::vector<Piece>& pieces, const char* incoming, int64_t bytes,
                   Arrival how);

}  // namespace pac::comm
