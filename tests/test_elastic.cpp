// Elastic resume's rules for what no built-in compressor exercises (apps/elastic_state.h): a
// fork's compressor with per-rank state and no rule starts afresh; generators are kept when the
// ranks' agree and re-derived per rank when not; --sync and criterion state is kept where the
// ranks agree and averaged where they differ.
#include <doctest/doctest.h>

#include "apps/elastic_state.h"

using namespace pac;

namespace {

// A fork's compressor whose state says nothing about other numbers of ranks.
class ForkCompressor : public comm::Compressor {
 public:
  std::string name() const override { return "fork"; }
  comm::WorkPtr reduce(comm::Bucket&, comm::ProcessGroup&) override {
    PAC_FAIL("not reduced in this test");
  }
};

Tensor filled(std::vector<float> values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = values[i];
  return t;
}

Tensor words(int64_t first) {
  Tensor t = Tensor::zeros({4}, DType::i64);
  t.data<int64_t>()[0] = first;
  return t;
}

}  // namespace

TEST_CASE("elastic resume: a compressor without a rule starts afresh and says so") {
  RunState saved;
  saved.compressor = "fork";
  saved.reducer["buckets"] = counter_tensor(3);
  for (int r = 0; r < 2; ++r)
    saved.ranks.push_back(
        {{"compressor.bucket0.sum", filled({1.0f + r})}, {"generator", words(7)}});
  ForkCompressor fork;
  const ElasticState mapped = map_rank_states(saved, &fork, counter_tensor(3), 0, 1, 10);
  CHECK(mapped.rank.count("compressor.bucket0.sum") == 0);
  REQUIRE(mapped.notes.size() == 2);
  CHECK(mapped.notes[0] ==
        "compressor fork: its state starts afresh: it has no rule for its 'sum' on another number "
        "of ranks");
  // The ranks' generators were the same: kept.
  CHECK(mapped.rank.at("generator").data<int64_t>()[0] == 7);
  CHECK(mapped.notes[1] == "random generator: as saved (every rank's was the same)");
}

TEST_CASE("elastic resume: generators differing between ranks are re-derived per rank and step") {
  RunState saved;
  for (int r = 0; r < 2; ++r) saved.ranks.push_back({{"generator", words(r)}});
  auto generator_of = [&](int rank, int64_t step) {
    return map_rank_states(saved, nullptr, Tensor(), rank, 5, step).rank.at("generator");
  };
  const Tensor a = generator_of(0, 10), b = generator_of(1, 10), c = generator_of(0, 11);
  CHECK(a.data<int64_t>()[0] != b.data<int64_t>()[0]);
  CHECK(a.data<int64_t>()[0] != c.data<int64_t>()[0]);
  CHECK(generator_of(0, 10).data<int64_t>()[0] == a.data<int64_t>()[0]);  // reproducible
}

TEST_CASE("elastic resume: --sync and criterion state kept where the ranks agree, else averaged") {
  RunState saved;
  saved.sync = "diloco:4";
  saved.prune = "taylor";
  for (int r = 0; r < 3; ++r) {
    saved.ranks.push_back({{"generator", words(1)},
                           {"sync.inner.w.momentum", filled({1.0f * r, 3.0f})},
                           {"sync.outer.w.momentum", filled({0.5f, 0.25f})},
                           {"sync.inner.step", counter_tensor(12)},
                           {"criterion.w.sum", filled({2.0f + r})}});
  }
  const ElasticState mapped = map_rank_states(saved, nullptr, Tensor(), 1, 0, 12);
  const Tensor inner = mapped.rank.at("sync.inner.w.momentum");
  CHECK(inner.data<float>()[0] == 1.0f);  // (0 + 1 + 2) / 3
  CHECK(inner.data<float>()[1] == 3.0f);
  CHECK(mapped.rank.at("sync.outer.w.momentum").data<float>()[1] == 0.25f);
  CHECK(mapped.rank.at("sync.inner.step").data<int64_t>()[0] == 12);
  CHECK(mapped.rank.at("criterion.w.sum").data<float>()[0] == 3.0f);
  CHECK(mapped.notes.back() ==
        "criterion taylor's sums: 1 entry averaged over the 3 saved ranks, 0 entries kept (the "
        "same on every rank)");
  // A counter that differs between ranks cannot be averaged: an error that names it.
  saved.ranks[2]["sync.inner.step"] = counter_tensor(13);
  CHECK_THROWS_WITH(map_rank_states(saved, nullptr, Tensor(), 1, 0, 12),
                    doctest::Contains("inner.step differs between the saved ranks"));
}
