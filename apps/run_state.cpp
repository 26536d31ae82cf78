#include "apps/run_state.h"

#include <cstring>

#include <fmt/format.h>

#include "apps/elastic_state.h"
#include "core/generator.h"

namespace pac {

namespace {

StateDict generator_state() {
  Generator::State words = default_generator().state();
  Tensor t = Tensor::empty({4}, DType::i64);
  std::memcpy(t.raw_data(), words.data(), sizeof(words));
  return {{"generator", t}};
}

// A fingerprint of the entries' names, shapes and types: ranks must agree on it before their
// states can be gathered as one block of bytes.
uint64_t layout_hash(const StateDict& state) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](const std::string& text) {
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  };
  for (const auto& [key, t] : state) mix(key + " " + t.str() + ";");
  return h;
}

// Every rank's `mine` on rank 0, in one all-gather of the concatenated bytes.
std::vector<StateDict> gather_to_rank0(comm::ProcessGroup& group, const StateDict& mine) {
  const int world = group.size();
  if (world == 1) return {mine};
  PAC_CHECK(all_ranks_equal(group, layout_hash(mine)),
            "checkpoint: the ranks' compressor states differ in layout; they cannot be saved "
            "together");
  int64_t bytes = 0;
  for (const auto& [key, t] : mine) bytes += static_cast<int64_t>(t.nbytes());
  Tensor packed = Tensor::empty({bytes}, DType::u8);
  int64_t at = 0;
  for (const auto& [key, t] : mine) {
    // Compressor and optimizer state lives where the buckets do, on a GPU too: copied from a host
    // copy, never through a GPU pointer.
    const Tensor host = t.cpu();
    std::memcpy(packed.data<uint8_t>() + at, host.raw_data(), host.nbytes());
    at += static_cast<int64_t>(host.nbytes());
  }
  Tensor all = Tensor::empty({bytes * world}, DType::u8);
  group.all_gather(packed, all)->wait();
  if (group.rank() != 0) return {};
  std::vector<StateDict> out(world);
  for (int r = 0; r < world; ++r) {
    const uint8_t* src = all.data<uint8_t>() + r * bytes;
    for (const auto& [key, t] : mine) {
      Tensor copy = Tensor::empty(t.shape(), t.dtype());
      std::memcpy(copy.raw_data(), src, copy.nbytes());
      src += copy.nbytes();
      out[r][key] = copy;
    }
  }
  return out;
}

}  // namespace

RunState capture_run_state(comm::ProcessGroup& group, comm::Reducer* reducer,
                           const std::string& compressor, prune::Pruner* pruner,
                           const std::string& sync, const StateDict& sync_state) {
  RunState state;
  StateDict mine = generator_state();
  state.sync = sync;
  add_prefixed(mine, "sync.", sync_state);
  if (reducer) {
    state.compressor = compressor;
    // The buckets as the next step lays them out, which the compressor's state then belongs to
    // (a run that reduces only at synchronisations may not have followed the masks yet).
    reducer->follow_masks();
    state.reducer["buckets"] = reducer->grouping();
    add_prefixed(mine, "compressor.", reducer->compressor().state());
  }
  if (pruner) {
    state.prune = pruner->options().criterion;
    state.pruner = pruner->state();
    // Between synchronisations each rank observed its own gradients.
    if (sync != "step") add_prefixed(mine, "criterion.", pruner->criterion_state());
  }
  state.ranks = gather_to_rank0(group, mine);
  return state;
}

RestoredRunState restore_run_state(const RunState& state, const std::string& path,
                                   comm::ProcessGroup& group, comm::Reducer* reducer,
                                   const std::string& compressor, prune::Pruner* pruner,
                                   const std::string& sync, uint64_t seed, int64_t step) {
  PAC_CHECK(state.sync == sync,
            "{}: checkpoint was trained with --sync {}, this run uses --sync {}; the ranks' "
            "optimizer states would not carry over",
            path, state.sync, sync);
  // A single process without compression has no reducer: that is dense too.
  auto or_dense = [](const std::string& name) { return name.empty() ? "dense" : name; };
  PAC_CHECK(or_dense(state.compressor) == or_dense(reducer ? compressor : ""),
            "{}: checkpoint was trained with --compress {}, this run uses {}; its compressor "
            "state would not carry over",
            path, or_dense(state.compressor), or_dense(reducer ? compressor : ""));
  const std::string prune = pruner ? pruner->options().criterion : "";
  PAC_CHECK(state.prune == prune,
            "{}: checkpoint was trained with {}, this run with {}; the pruning state would not "
            "carry over",
            path, state.prune.empty() ? "no --prune" : "--prune " + state.prune,
            prune.empty() ? "no --prune" : "--prune " + prune);
  if (pruner) pruner->load_state(state.pruner);
  RestoredRunState out;
  StateDict mine;
  if (static_cast<int>(state.ranks.size()) == group.size()) {
    mine = state.ranks[static_cast<size_t>(group.rank())];
  } else {
    // The saved run's buckets, which its compressor state belongs to, until a mask changes.
    if (reducer) {
      reducer->follow_masks();
      const Tensor own = reducer->grouping();
      auto saved = state.reducer.find("buckets");
      if (saved != state.reducer.end() && !same_bytes(own, saved->second) &&
          reducer->adopt_grouping(saved->second)) {
        reducer->follow_masks();
        out.notes.push_back(fmt::format(
            "gradient buckets: the saved run's {}, kept until a mask changes (this run's wire "
            "bytes group the parameters otherwise)",
            saved->second.numel()));
      }
    }
    ElasticState mapped =
        map_rank_states(state, reducer ? &reducer->compressor() : nullptr,
                        reducer ? reducer->grouping() : Tensor(), group.rank(), seed, step);
    mine = std::move(mapped.rank);
    out.notes.insert(out.notes.end(), mapped.notes.begin(), mapped.notes.end());
  }
  StateReader read(path + ": rank " + std::to_string(group.rank()), mine);
  StateDict compressor_state = read.section("compressor.");
  if (reducer) reducer->load_compressor_state(compressor_state);
  Tensor words = read.tensor("generator", {4}, DType::i64);
  Generator::State generator;
  std::memcpy(generator.data(), words.raw_data(), sizeof(generator));
  default_generator().set_state(generator);
  out.sync = read.section("sync.");
  StateDict criterion_state = read.section("criterion.");
  if (pruner && !criterion_state.empty()) pruner->load_criterion_state(criterion_state);
  read.finish();
  return out;
}

}  // namespace pac
