#include "prune/mask_sync.h"

namespace pac::prune {

namespace {

// Every parameter's mask on the host (the host's view of a GPU mask); undefined where it has none.
std::vector<Tensor> host_masks(const NamedParameters& params) {
  std::vector<Tensor> masks;
  for (const auto& [name, p] : params) masks.push_back(p->has_mask() ? p->mask().cpu() : Tensor());
  return masks;
}

// Calls f(parameter index, entry index, kept) for every entry, in a fixed order; an undefined
// mask keeps every entry.
template <class F>
void for_each_entry(const NamedParameters& params, const std::vector<Tensor>& masks, F f) {
  for (size_t i = 0; i < params.size(); ++i) {
    const uint8_t* m = masks[i].defined() ? masks[i].data<uint8_t>() : nullptr;
    for (int64_t j = 0, n = params[i].second->numel(); j < n; ++j) f(i, j, m ? m[j] != 0 : true);
  }
}

}  // namespace

void install_masks(comm::ProcessGroup& group, const NamedParameters& params,
                   const std::vector<Tensor>& proposed) {
  int64_t total = 0;
  for (const auto& [name, p] : params) total += p->numel();
  Tensor bits = Tensor::zeros({(total + 7) / 8}, DType::u8);
  uint8_t* b = bits.data<uint8_t>();
  if (group.rank() == 0) {
    PAC_CHECK(proposed.size() == params.size(), "install_masks: {} masks for {} parameters",
              proposed.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      PAC_CHECK(!proposed[i].defined() || (proposed[i].numel() == params[i].second->numel() &&
                                           proposed[i].dtype() == DType::u8),
                "install_masks: the mask of '{}' is {}, expected u8 with {} entries",
                params[i].first, proposed[i].str(), params[i].second->numel());
    }
    int64_t at = 0;
    for_each_entry(params, proposed, [&](size_t, int64_t, bool kept) {
      if (kept) b[at >> 3] |= static_cast<uint8_t>(1u << (at & 7));
      ++at;
    });
  }
  if (group.size() > 1) group.broadcast(bits, 0)->wait();
  // From here on every rank, rank 0 included, runs the same code on the same bits, so every rank
  // changes exactly the same parameters' masks.
  int64_t at = 0;
  for (const auto& [name, p] : params) {
    Tensor mask = Tensor::empty(p->shape(), DType::u8);
    uint8_t* m = mask.data<uint8_t>();
    bool all_kept = true, differs = false;
    Tensor my_mask = p->has_mask() ? p->mask().cpu() : Tensor();
    const uint8_t* mine = my_mask.defined() ? my_mask.data<uint8_t>() : nullptr;
    for (int64_t j = 0, n = p->numel(); j < n; ++j, ++at) {
      m[j] = (b[at >> 3] >> (at & 7)) & 1u;
      all_kept = all_kept && m[j];
      differs = differs || m[j] != (mine ? mine[j] : 1);
    }
    if (!differs) continue;
    if (all_kept)
      p->clear_mask();
    else
      p->set_mask(mask);
  }
}

void broadcast_masks(comm::ProcessGroup& group, const NamedParameters& params) {
  if (group.size() == 1) return;
  install_masks(group, params, group.rank() == 0 ? host_masks(params) : std::vector<Tensor>());
}

uint64_t mask_checksum(const NamedParameters& params) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&](uint64_t byte) {
    h ^= byte;
    h *= 1099511628211ull;
  };
  size_t current = SIZE_MAX;
  for_each_entry(params, host_masks(params), [&](size_t i, int64_t, bool kept) {
    if (i != current) {  // parameter boundaries count, so masks cannot shift between parameters
      mix(0xff);
      current = i;
    }
    mix(kept ? 1 : 0);
  });
  return h;
}

void check_masks_agree(comm::ProcessGroup& group, const NamedParameters& params) {
  PAC_CHECK(comm::all_ranks_equal(group, mask_checksum(params)),
            "rank {}: the pruning masks differ between ranks (mask checksum {:016x} on this rank); "
            "the compact all-reduce would mix up entries, so training stops",
            group.rank(), mask_checksum(params));
}

}  // namespace pac::prune
