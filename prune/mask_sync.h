// Keeping the pruning masks identical on every rank, which the PacTrain compressor relies on: the
// masks are computed on rank 0 and broadcast as a bitmask, then every rank's checksum is
// compared; a mismatch stops every rank with a clear message instead of corrupting the run.
#pragma once

#include "comm/process_group.h"
#include "prune/criterion.h"

namespace pac::prune {

// Rank 0's masks of `params` (1 bit per entry; no mask = all kept) go to every rank, which
// installs them where its own differ.
void broadcast_masks(comm::ProcessGroup& group, const NamedParameters& params);
// 64-bit FNV-1a over every parameter's mask (no mask counts as all ones).
uint64_t mask_checksum(const NamedParameters& params);
// Throws on every rank when any two ranks' masks differ.
void check_masks_agree(comm::ProcessGroup& group, const NamedParameters& params);

}  // namespace pac::prune
