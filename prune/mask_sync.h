// Keeping the pruning masks identical on every rank, which the PacTrain compressor relies on: the
// masks are computed on rank 0 and broadcast as a bitmask, then every rank's checksum is
// compared; a mismatch stops every rank with a clear message instead of corrupting the run.
#pragma once

#include "comm/process_group.h"
#include "prune/criterion.h"

namespace pac::prune {

// Installs rank 0's `proposed` masks of `params` (u8, one per parameter; undefined = all kept;
// read on rank 0 only) on every rank: they travel as a bitmask, and every rank, rank 0 included,
// installs them with the same code, leaving a parameter whose mask is unchanged untouched and
// removing the mask of one whose entries are all kept. So every rank changes the same
// parameters' masks and mask versions, on which the compressors decide when to rebuild a bucket's
// plan (and its collectives); a rank that changed more would run collectives the others do not.
void install_masks(comm::ProcessGroup& group, const NamedParameters& params,
                   const std::vector<Tensor>& proposed);
// Rank 0's current masks of `params` to every rank, which installs them where its own differ.
void broadcast_masks(comm::ProcessGroup& group, const NamedParameters& params);
// 64-bit FNV-1a over every parameter's mask (no mask counts as all ones).
uint64_t mask_checksum(const NamedParameters& params);
// Throws on every rank when any two ranks' masks differ.
void check_masks_agree(comm::ProcessGroup& group, const NamedParameters& params);

}  // namespace pac::prune
