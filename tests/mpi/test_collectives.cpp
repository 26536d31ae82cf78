// Collectives against expected values computed from rank-dependent inputs, and the byte counts
// of the ring algorithms.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "comm/packed_fields.h"
#include "core/tensor.h"
#include "tests/mpi/world.h"

using namespace pac;
using comm::ReduceOp;
using pac::testing::world;

namespace {

// Element i on rank r: r + 1 + i / 10 (distinct per rank and per element).
Tensor rank_values(int64_t n, int rank) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank + 1) + static_cast<float>(i) / 10;
  return Tensor::from_vector(v, {n});
}

}  // namespace

TEST_CASE("all_reduce sum, avg and max of f32 with rank-dependent values") {
  int p = world().size(), r = world().rank();
  for (int64_t n : {1, 7, 1000, 100003}) {
    CAPTURE(n);
    Tensor sum = rank_values(n, r), avg = rank_values(n, r), mx = rank_values(n, r);
    auto w1 = world().all_reduce(sum, ReduceOp::sum);
    auto w2 = world().all_reduce(avg, ReduceOp::avg);
    auto w3 = world().all_reduce(mx, ReduceOp::max);
    w1->wait();
    w2->wait();
    w3->wait();
    double rank_sum = p * (p + 1) / 2.0;
    for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 97)) {
      double base = static_cast<double>(i) / 10;
      REQUIRE(sum.to_vector()[i] == doctest::Approx(rank_sum + p * base).epsilon(1e-5));
      REQUIRE(avg.to_vector()[i] == doctest::Approx(rank_sum / p + base).epsilon(1e-5));
      REQUIRE(mx.to_vector()[i] == doctest::Approx(p + base).epsilon(1e-6));
    }
  }
}

TEST_CASE("all_reduce of integer and 16-bit types") {
  int p = world().size(), r = world().rank();
  Tensor i8 = Tensor::full({5}, static_cast<float>(r % 2 ? -1 : 1)).to(DType::i8);
  world().all_reduce(i8, ReduceOp::sum)->wait();
  int expected = 0;
  for (int k = 0; k < p; ++k) expected += k % 2 ? -1 : 1;
  CHECK(i8.to_vector() == std::vector<float>(5, static_cast<float>(expected)));
  Tensor i32 = Tensor::full({3}, static_cast<float>(r * 1000)).to(DType::i32);
  world().all_reduce(i32, ReduceOp::max)->wait();
  CHECK(i32.to_vector() == std::vector<float>(3, static_cast<float>((p - 1) * 1000)));
  Tensor h = Tensor::full({9}, 0.5f * (r + 1)).to(DType::f16);
  world().all_reduce(h, ReduceOp::sum)->wait();
  CHECK(h.to_vector()[8] == doctest::Approx(0.5 * p * (p + 1) / 2));
}

TEST_CASE("ring all_reduce sends 2 (P - 1) / P of the buffer") {
  int p = world().size();
  int64_t n = 1200 * p;
  Tensor t = rank_values(n, world().rank());
  uint64_t before = world().bytes_sent();
  world().all_reduce(t, ReduceOp::sum)->wait();
  CHECK(world().bytes_sent() - before == static_cast<uint64_t>(2 * (p - 1) * (n / p) * 4));
}

TEST_CASE("broadcast from every root") {
  int p = world().size(), r = world().rank();
  for (int root = 0; root < p; ++root) {
    Tensor t = rank_values(3000, r);
    world().broadcast(t, root)->wait();
    CHECK(t.to_vector() == rank_values(3000, root).to_vector());
  }
}

TEST_CASE("all_gather and variable-size all_gather_v") {
  int p = world().size(), r = world().rank();
  Tensor out = Tensor::zeros({4 * p});
  world().all_gather(rank_values(4, r), out)->wait();
  for (int k = 0; k < p; ++k) {
    CHECK(out.to_vector()[4 * k + 3] == doctest::Approx(k + 1 + 0.3));
  }
  // Rank k contributes k + 1 elements.
  std::vector<int64_t> counts(p);
  int64_t total = 0;
  for (int k = 0; k < p; ++k) total += counts[k] = k + 1;
  Tensor gathered = Tensor::zeros({total});
  world().all_gather_v(rank_values(r + 1, r), gathered, counts)->wait();
  int64_t at = 0;
  for (int k = 0; k < p; ++k) {
    CHECK(gathered.to_vector()[at] == doctest::Approx(k + 1));
    CHECK(gathered.to_vector()[at + k] == doctest::Approx(k + 1 + k / 10.0));
    at += k + 1;
  }
  CHECK_THROWS_AS(world().all_gather_v(rank_values(r + 2, r), gathered, counts), Error);
}

TEST_CASE("reduce_scatter leaves block r, reduced, on rank r") {
  int p = world().size(), r = world().rank();
  Tensor in = rank_values(5 * p, r), out = Tensor::zeros({5});
  world().reduce_scatter(in, out, ReduceOp::sum)->wait();
  double rank_sum = p * (p + 1) / 2.0;
  for (int64_t i = 0; i < 5; ++i) {
    CHECK(out.to_vector()[i] == doctest::Approx(rank_sum + p * (5 * r + i) / 10.0));
  }
}

TEST_CASE("the nccl backend: refused for CPU training, and a missing GPU is a clear error") {
  CHECK_THROWS_WITH_AS(comm::make_process_group("nccl", Device::cpu()),
                       doctest::Contains("train with --device cuda"), Error);
  if (cuda_device_count() == 0) {
    // Under mpirun, auto picks nccl for a GPU model; without a GPU (or without NCCL in the
    // build) that fails before any MPI state is touched, so this rank's MPI stays usable.
    CHECK_THROWS_AS(comm::make_process_group("auto", Device::cuda()), Error);
    Tensor t = Tensor::full({1}, 1.0f);
    world().all_reduce(t, comm::ReduceOp::sum)->wait();
    CHECK(t.item() == static_cast<float>(world().size()));
  }
}

namespace {

// This rank's segments for a coalesced all-reduce: f32 sums of random values (summation order
// shows in their bits), i16 sums, f32 maxima, an f32 average and a one-element verdict.
std::vector<comm::ReduceSegment> mixed_segments(int rank, int64_t n) {
  Generator g(1000 + rank);
  Tensor ints = Tensor::full({n / 2 + 3}, static_cast<float>(rank - 2)).to(DType::i16);
  return {{g.randn({n}), ReduceOp::sum},
          {ints, ReduceOp::sum},
          {g.randn({n / 3 + 1}), ReduceOp::max},
          {g.randn({n + 5}), ReduceOp::avg},
          {Tensor::full({1}, static_cast<float>(rank % 2)), ReduceOp::max}};
}

std::vector<comm::ReduceSegment> copies(const std::vector<comm::ReduceSegment>& segments) {
  std::vector<comm::ReduceSegment> out;
  for (const auto& s : segments) out.push_back({s.tensor.clone(), s.op});
  return out;
}

int log2_floor(int p) {
  int k = 0;
  while ((2 << k) <= p) ++k;
  return k;
}

}  // namespace

TEST_CASE("a coalesced all-reduce gives every segment the bits all_reduce gives it alone") {
  const int p = world().size(), r = world().rank();
  const bool power_of_two = (p & (p - 1)) == 0;
  for (auto algorithm : {comm::AllReduceAlgorithm::ring, comm::AllReduceAlgorithm::doubling}) {
    const bool ring = algorithm == comm::AllReduceAlgorithm::ring;
    CAPTURE(ring);
    pac::testing::AlgorithmScope scope(algorithm);
    auto together = mixed_segments(r, 301), alone = copies(together);
    const uint64_t bytes_before = world().bytes_sent(), exchanges_before = world().exchanges();
    world().all_reduce_coalesced(together)->wait();
    const uint64_t coalesced_bytes = world().bytes_sent() - bytes_before;
    const uint64_t coalesced_exchanges = world().exchanges() - exchanges_before;
    const uint64_t separate_before = world().bytes_sent();
    for (auto& s : alone) world().all_reduce(s.tensor, s.op)->wait();
    const uint64_t separate_bytes = world().bytes_sent() - separate_before;
    for (size_t i = 0; i < together.size(); ++i) {
      CAPTURE(i);
      CHECK(together[i].tensor.to(DType::f32).to_vector() ==
            alone[i].tensor.to(DType::f32).to_vector());
    }
    CHECK(coalesced_bytes == separate_bytes);  // the same data, only fewer messages
    if (ring) CHECK(coalesced_exchanges == static_cast<uint64_t>(2 * (p - 1)));
    if (!ring && power_of_two) CHECK(coalesced_exchanges == static_cast<uint64_t>(log2_floor(p)));
    // The sums are right, too: i16 exactly, the average within rounding.
    int expected = 0;
    for (int k = 0; k < p; ++k) expected += k - 2;
    CHECK(together[1].tensor.to(DType::f32).to_vector()[7] == static_cast<float>(expected));
    CHECK(together[4].tensor.item() == (p > 1 ? 1.0f : 0.0f));
  }
}

TEST_CASE("the MPI library's all-reduce gives the ring's results, 16-bit floats included") {
  const int r = world().rank();
  auto library = mixed_segments(r, 301), ring = copies(library);
  Generator g(50 + r);
  for (DType dtype : {DType::bf16, DType::f16}) {
    library.push_back({g.randn({37}).to(dtype), ReduceOp::sum});
    library.push_back({g.randn({37}).to(dtype), ReduceOp::max});
    ring.push_back({library[library.size() - 2].tensor.clone(), ReduceOp::sum});
    ring.push_back({library.back().tensor.clone(), ReduceOp::max});
  }
  {
    pac::testing::AlgorithmScope scope(comm::AllReduceAlgorithm::mpi);
    world().all_reduce_coalesced(library)->wait();
  }
  {
    pac::testing::AlgorithmScope scope(comm::AllReduceAlgorithm::ring);
    world().all_reduce_coalesced(ring)->wait();
  }
  for (size_t i = 0; i < library.size(); ++i) {
    CAPTURE(i);
    const auto a = library[i].tensor.to(DType::f32).to_vector();
    const auto b = ring[i].tensor.to(DType::f32).to_vector();
    REQUIRE(a.size() == b.size());
    // Sums may be added in another order: equal within the storage type's rounding.
    const bool sixteen =
        library[i].tensor.dtype() == DType::bf16 || library[i].tensor.dtype() == DType::f16;
    for (size_t k = 0; k < a.size(); ++k) {
      CHECK(a[k] == doctest::Approx(b[k]).epsilon(sixteen ? 2e-2 : 1e-5).scale(1.0));
    }
    CHECK(pac::testing::identical_on_every_rank(library[i].tensor.to(DType::f32)));
  }
}

TEST_CASE("a segment's purpose counts the bytes it costs inside a coalesced message") {
  for (auto algorithm : {comm::AllReduceAlgorithm::ring, comm::AllReduceAlgorithm::doubling}) {
    CAPTURE(algorithm == comm::AllReduceAlgorithm::ring);
    pac::testing::AlgorithmScope scope(algorithm);
    Tensor flag = Tensor::full({1}, 1.0f);
    const uint64_t alone_before = world().bytes_sent();
    world().all_reduce(flag, comm::ReduceOp::max)->wait();
    const uint64_t alone = world().bytes_sent() - alone_before;
    const uint64_t before = world().bytes_sent_for("test-rider");
    world()
        .all_reduce_coalesced({{Tensor::full({301}, 1.0f), comm::ReduceOp::sum},
                               {flag, comm::ReduceOp::max, "test-rider"}})
        ->wait();
    CHECK(world().bytes_sent_for("test-rider") - before == alone);
  }
}

namespace {

// Field j of rank r: a code in 0..6 (ternary codes of levels 3 travel as t + 3), spread over the
// range, or bunched in its middle as pactrain's codes are (3 in three draws of four, 2 or 4 in
// most of the rest).
int64_t code(int r, int64_t j, bool bunched = false) {
  const int64_t spread = (r * 5 + j * 3 + j / 7) % 7;
  if (!bunched) return spread;
  const uint64_t h = (static_cast<uint64_t>(r) * 1000003 + j) * 0x9e3779b97f4a7c15ull >> 58;
  return h < 48 ? 3 : h < 56 ? 2 : h < 62 ? 4 : spread;
}

// Fields of `bits` in int64 words, as the ternary writer lays them out.
Tensor pack_codes(int r, int64_t values, int bits, bool bunched = false) {
  const int per_word = comm::fields_per_word(bits);
  std::vector<int64_t> words(comm::packed_words(values, bits), 0);
  for (int64_t j = 0; j < values; ++j)
    words[j / per_word] += code(r, j, bunched) << (j % per_word * bits);
  Tensor t = Tensor::zeros({static_cast<int64_t>(words.size())}, DType::i64);
  std::copy(words.begin(), words.end(), t.data<int64_t>());
  return t;
}

}  // namespace

TEST_CASE("packed sums travel narrower while few ranks are summed, and coded, to the same result") {
  const int p = world().size(), r = world().rank();
  const int bits = comm::bits_for(6 * p);
  for (auto algorithm : {comm::AllReduceAlgorithm::ring, comm::AllReduceAlgorithm::doubling}) {
    for (int64_t values : {1, 37, 5003}) {
      for (bool bunched : {false, true}) {
        CAPTURE(algorithm == comm::AllReduceAlgorithm::ring);
        CAPTURE(values);
        CAPTURE(bunched);
        pac::testing::AlgorithmScope scope(algorithm);
        // The same fields three times: as plain words, then told they are packed, sent as
        // fields and coded; each with an fp32 segment beside it, as pactrain sends its codes and
        // 1-D values.
        Tensor plain = pack_codes(r, values, bits, bunched);
        Tensor floats = rank_values(301, r);
        auto sent = [&](Tensor words, comm::PackedSum packed, comm::PackedWire wire) {
          floats = rank_values(301, r);
          world().set_packed_wire(wire);
          const uint64_t before = world().bytes_sent(), exchanges = world().exchanges();
          world()
              .all_reduce_coalesced(
                  {{words, ReduceOp::sum, nullptr, packed}, {floats, ReduceOp::sum}})
              ->wait();
          world().set_packed_wire(comm::PackedWire::coded);
          return std::pair(world().bytes_sent() - before, world().exchanges() - exchanges);
        };
        const comm::PackedSum packed{values, bits, 6};
        const auto [plain_bytes, plain_exchanges] = sent(plain, {}, comm::PackedWire::coded);
        Tensor narrow = pack_codes(r, values, bits, bunched);
        const uint64_t narrow_bytes = sent(narrow, packed, comm::PackedWire::fields).first;
        Tensor coded = pack_codes(r, values, bits, bunched);
        const uint64_t coded_bytes = sent(coded, packed, comm::PackedWire::coded).first;
        // Every field is the sum of the ranks' codes, however it travelled.
        const int per_word = comm::fields_per_word(bits);
        const int64_t* words = narrow.data<int64_t>();
        for (int64_t j = 0; j < values; ++j) {
          int64_t expected = 0;
          for (int k = 0; k < p; ++k) expected += code(k, j, bunched);
          const int64_t field = (words[j / per_word] >> (j % per_word * bits)) & ((1 << bits) - 1);
          REQUIRE(field == expected);
        }
        CHECK(narrow.to_vector() == plain.to_vector());
        CHECK(coded.to_vector() == plain.to_vector());
        CHECK(pac::testing::identical_on_every_rank(floats));
        if (p == 1) continue;
        if (values == 5003) CHECK(narrow_bytes < plain_bytes);
        // A coded run is never longer than its fields and the byte that says so.
        CHECK(coded_bytes <= narrow_bytes + plain_exchanges);
        if (values == 5003 && bunched) CHECK(double(coded_bytes) < 0.8 * double(narrow_bytes));
        if (values == 5003 && p == 2 && algorithm == comm::AllReduceAlgorithm::doubling) {
          // Doubling's one exchange carries one rank's codes, which fit 3 bits (21 to a word);
          // the sum of two needs 4 (15 to a word).
          CHECK(narrow_bytes ==
                plain_bytes - 8 * (comm::packed_words(values, 4) - comm::packed_words(values, 3)));
        }
      }
    }
  }
}

TEST_CASE("packed fields that do not fit their sums or their tensor are refused") {
  const int p = world().size();
  if (p == 1) return;
  const int bits = comm::bits_for(6 * p);
  Tensor words = pack_codes(world().rank(), 100, bits);
  CHECK_THROWS_WITH_AS(world().all_reduce_coalesced(
                           {{words, ReduceOp::sum, nullptr, comm::PackedSum{100, bits, 6 * p}}}),
                       doctest::Contains("cannot hold"), Error);
  CHECK_THROWS_WITH_AS(world().all_reduce_coalesced(
                           {{words, ReduceOp::sum, nullptr, comm::PackedSum{99999, bits, 6}}}),
                       doctest::Contains("fill"), Error);
}

TEST_CASE("a 4-byte all-reduce takes log2 P exchanges and leaves the same bits on every rank") {
  const int p = world().size(), r = world().rank();
  Generator g(7 + r);
  Tensor value = g.randn({1});
  Tensor all = Tensor::zeros({p});
  world().all_gather(value.clone(), all)->wait();
  const uint64_t before = world().exchanges();
  world().all_reduce(value, ReduceOp::sum)->wait();
  const uint64_t exchanges = world().exchanges() - before;
  double exact = 0;
  for (float v : all.to_vector()) exact += v;
  CHECK(value.item() == doctest::Approx(exact).epsilon(1e-5));
  CHECK(pac::testing::identical_on_every_rank(value));
  if ((p & (p - 1)) == 0) {
    CHECK(exchanges == static_cast<uint64_t>(log2_floor(p)));  // 3 on 8 ranks; the ring takes 14
  } else {
    CHECK(exchanges <= static_cast<uint64_t>(log2_floor(p) + 2));
  }
}

TEST_CASE("the communication thread's CPU time and its wake-ups are counted") {
  // Rank 0 joins 50 ms late: the others sleep between polls meanwhile, and wake up to look.
  const double cpu_before = world().communication_cpu_s();
  const uint64_t wakeups_before = world().wakeups();
  const auto start = std::chrono::steady_clock::now();
  if (world().rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Tensor values = Tensor::full({1 << 20}, 1.0f);
  world().all_reduce(values, ReduceOp::sum)->wait();
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_s = world().communication_cpu_s() - cpu_before;
  CHECK(values.to_vector()[12345] == static_cast<float>(world().size()));
  CHECK(cpu_s > 0.0);              // the sums of 4 MB took some
  CHECK(cpu_s <= wall_s + 0.005);  // one thread uses at most the time it ran
  if (world().rank() != 0) CHECK(world().wakeups() - wakeups_before > 0);
}

TEST_CASE("a queue of slow collectives is not taken for a hung peer: each gets the whole timeout") {
  // Rank 0 launches four all-reduces at once and waits for the last; its peers launch theirs
  // 0.5 s apart, so each collective takes 0.5 s and the last ends 2 s after rank 0's wait began,
  // past the 1.5 s timeout. A timeout counted from the wait would end the process (exit 3).
  const double before = world().timeout_s();
  world().set_timeout(1.5);
  std::vector<Tensor> values;
  std::vector<comm::WorkPtr> works;
  for (int i = 0; i < 4; ++i) {
    if (world().rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    values.push_back(Tensor::full({4}, 1.0f));
    works.push_back(world().all_reduce(values.back(), comm::ReduceOp::sum));
  }
  works.back()->wait();
  for (auto& w : works) w->wait();
  world().set_timeout(before);
  CHECK(values.back().to_vector()[0] == static_cast<float>(world().size()));
}
