#include "apps/elastic_state.h"

#include <cstring>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/generator.h"

namespace pac {

namespace {

// Every saved rank's entries under `prefix`, the prefix taken off.
std::vector<StateDict> sections(const RunState& saved, const std::string& prefix) {
  std::vector<StateDict> out(saved.ranks.size());
  for (size_t r = 0; r < saved.ranks.size(); ++r) {
    for (const auto& [key, t] : saved.ranks[r]) {
      if (key.rfind(prefix, 0) == 0) out[r][key.substr(prefix.size())] = t;
    }
  }
  return out;
}

// Every saved rank's `key` in `states`; the ranks' layouts were checked equal when they were
// saved (apps/run_state.cpp), so each has it.
std::vector<Tensor> across_ranks(const std::vector<StateDict>& states, const std::string& key) {
  std::vector<Tensor> all;
  for (const auto& state : states) all.push_back(state.at(key).cpu());
  return all;
}

bool all_same(const std::vector<Tensor>& all) {
  for (size_t r = 1; r < all.size(); ++r) {
    if (!same_bytes(all[r], all[0])) return false;
  }
  return true;
}

// The element-wise mean, summed in double so that the ranks' order does not matter.
Tensor mean_of(const std::vector<Tensor>& all, const std::string& what) {
  PAC_CHECK(all[0].dtype() == DType::f32,
            "{} differs between the saved ranks and is {}, not f32: it cannot be averaged", what,
            all[0].str());
  const int64_t n = all[0].numel();
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  for (const Tensor& t : all) {
    const float* v = t.data<float>();
    for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += v[i];
  }
  Tensor mean = Tensor::empty(all[0].shape(), DType::f32);
  float* out = mean.data<float>();
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(sum[static_cast<size_t>(i)] / static_cast<double>(all.size()));
  return mean;
}

// "bucket3.residual" -> "residual"; PowerSGD's "bucket3.entry2.error" -> "entry2.error".
std::string bucket_entry(const std::string& key) { return key.substr(key.find('.') + 1); }
// What a note calls it: "residual", "error".
std::string short_name(const std::string& key) { return key.substr(key.rfind('.') + 1); }

void map_compressor(const RunState& saved, const comm::Compressor* compressor,
                    const Tensor& grouping, ElasticState& out) {
  const std::vector<StateDict> states = sections(saved, "compressor.");
  if (states.front().empty()) return;  // stateless, or nothing to carry yet
  PAC_CHECK(compressor != nullptr, "the checkpoint holds compressor {}'s state, this run has none",
            saved.compressor);
  const std::string name = compressor->name();
  std::string why;
  auto saved_grouping = saved.reducer.find("buckets");
  if (saved_grouping == saved.reducer.end()) {
    why = "the checkpoint does not record its buckets";
  } else if (!grouping.defined() || !same_bytes(saved_grouping->second, grouping)) {
    why = fmt::format("its buckets on {} ranks group the parameters otherwise",
                      grouping.defined() ? "these" : "no");
  }
  StateDict merged;
  std::set<std::string> averaged, kept;
  for (const auto& [key, first] : states.front()) {
    if (!why.empty()) break;
    const std::string what = bucket_entry(key);
    const comm::RankStateRule rule = compressor->rank_state_rule(what);
    if (rule == comm::RankStateRule::reset) {
      why = fmt::format("it has no rule for its '{}' on another number of ranks", what);
      break;
    }
    const std::vector<Tensor> all = across_ranks(states, key);
    if (rule == comm::RankStateRule::mean) {
      merged[key] = all_same(all) ? all[0] : mean_of(all, "compressor " + name + "'s " + key);
      averaged.insert(short_name(key));
    } else {
      for (size_t r = 1; r < all.size(); ++r) {
        PAC_CHECK(same_bytes(all[r], all[0]),
                  "compressor {} says its '{}' is the same on every rank, but in the checkpoint "
                  "rank {}'s differs from rank 0's",
                  name, key, r);
      }
      merged[key] = all[0];
      kept.insert(short_name(key));
    }
  }
  if (!why.empty()) {
    out.notes.push_back(fmt::format("compressor {}: its state starts afresh: {}", name, why));
    return;
  }
  add_prefixed(out.rank, "compressor.", merged);
  std::vector<std::string> parts;
  if (!averaged.empty())
    parts.push_back(fmt::format("{} averaged over the {} saved ranks", fmt::join(averaged, ", "),
                                states.size()));
  if (!kept.empty()) parts.push_back(fmt::format("{} as saved", fmt::join(kept, ", ")));
  out.notes.push_back(fmt::format("compressor {}: {}", name, fmt::join(parts, "; ")));
}

void map_generator(const RunState& saved, int rank, uint64_t seed, int64_t step,
                   ElasticState& out) {
  std::vector<Tensor> all;
  for (size_t r = 0; r < saved.ranks.size(); ++r) {
    auto it = saved.ranks[r].find("generator");
    PAC_CHECK(it != saved.ranks[r].end(), "the checkpoint has no generator state for rank {}", r);
    all.push_back(it->second.cpu());
  }
  if (all_same(all)) {
    out.rank["generator"] = all[0];
    out.notes.push_back("random generator: as saved (every rank's was the same)");
    return;
  }
  Generator derived(seed ^ (static_cast<uint64_t>(rank) << 40) ^
                    (static_cast<uint64_t>(step) * 0x9e3779b97f4a7c15ull));
  const Generator::State words = derived.state();
  Tensor t = Tensor::empty({4}, DType::i64);
  std::memcpy(t.raw_data(), words.data(), sizeof(words));
  out.rank["generator"] = t;
  out.notes.push_back("random generators: re-derived from the seed, the rank and the step");
}

// An entry equal on every saved rank is kept; a floating-point one that differs is averaged.
void map_by_agreement(const RunState& saved, const std::string& prefix, const std::string& label,
                      ElasticState& out) {
  const std::vector<StateDict> states = sections(saved, prefix);
  if (states.front().empty()) return;
  int averaged = 0, kept = 0;
  for (const auto& [key, first] : states.front()) {
    const std::vector<Tensor> all = across_ranks(states, key);
    if (all_same(all)) {
      out.rank[prefix + key] = all[0];
      ++kept;
    } else {
      out.rank[prefix + key] = mean_of(all, label + "'s " + key);
      ++averaged;
    }
  }
  auto entries = [](int n) { return fmt::format("{} {}", n, n == 1 ? "entry" : "entries"); };
  out.notes.push_back(
      fmt::format("{}: {} averaged over the {} saved ranks, {} kept (the same on "
                  "every rank)",
                  label, entries(averaged), states.size(), entries(kept)));
}

}  // namespace

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ha = a.cpu(), hb = b.cpu();
  return std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes()) == 0;
}

ElasticState map_rank_states(const RunState& saved, const comm::Compressor* compressor,
                             const Tensor& grouping, int rank, uint64_t seed, int64_t step) {
  PAC_CHECK(!saved.ranks.empty(), "the checkpoint holds no rank's state");
  ElasticState out;
  map_compressor(saved, compressor, grouping, out);
  map_generator(saved, rank, seed, step, out);
  map_by_agreement(saved, "sync.", "--sync " + saved.sync + " state", out);
  map_by_agreement(saved, "criterion.", "criterion " + saved.prune + "'s sums", out);
  return out;
}

}  // namespace pac
