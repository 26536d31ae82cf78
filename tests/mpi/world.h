// The MPI process group shared by the multi-rank tests, and helpers they share.
#pragma once

#include <bit>

#include "comm/compressor.h"
#include "comm/compressors/ternary_codec.h"
#include "comm/process_group.h"
#include "core/generator.h"
#include "core/ops.h"
#include "layers/linear.h"
#include "layers/sequential.h"
#include "layers/simple_layers.h"

namespace pac::testing {

comm::ProcessGroup& world();

// A non-owning pointer to the shared world group, for the Reducer and the Pruner.
inline comm::ProcessGroupPtr world_ptr() {
  return comm::ProcessGroupPtr(&world(), [](auto*) {});
}

// A small MLP (6 -> 32 -> 32 -> 3, tanh), initialised from `seed`.
inline std::shared_ptr<nn::Sequential> small_model(uint64_t seed) {
  default_generator().manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 3)});
}

// Sets the world's all-reduce algorithm for one scope and puts `automatic` back after it. The
// byte formulas of the tests are the ring's; small messages would otherwise go by doubling.
struct AlgorithmScope {
  explicit AlgorithmScope(comm::AllReduceAlgorithm a) { world().set_all_reduce_algorithm(a); }
  ~AlgorithmScope() { world().set_all_reduce_algorithm(comm::AllReduceAlgorithm::automatic); }
  AlgorithmScope(const AlgorithmScope&) = delete;
  AlgorithmScope& operator=(const AlgorithmScope&) = delete;
};

// Sends packed sums as fields for one scope, and coded again after it: the byte formulas of the
// tests are the fields'.
struct FieldsScope {
  FieldsScope() { world().set_packed_wire(comm::PackedWire::fields); }
  ~FieldsScope() { world().set_packed_wire(comm::PackedWire::coded); }
  FieldsScope(const FieldsScope&) = delete;
  FieldsScope& operator=(const FieldsScope&) = delete;
};

// One step of a compressor driven directly, as the Reducer drives it: reduce the bucket, wait,
// and end the step as applied (which commits what the step left in the compressor's state).
inline void reduce_step(comm::Compressor& c, comm::Bucket& bucket) {
  c.reduce(bucket, world())->wait();
  c.end_step(true);
}

// Bytes rank r sends in a ring all-reduce of n elements: every chunk but its own in the
// reduce-scatter, every chunk but its right neighbour's in the all-gather.
inline uint64_t ring_bytes(int64_t n, int64_t element_bytes, int r, int p) {
  if (p == 1) return 0;
  auto chunk = [&](int c) { return n * (c + 1) / p - n * c / p; };
  return static_cast<uint64_t>(element_bytes * ((n - chunk(r)) + (n - chunk((r + 1) % p))));
}

// Bytes rank r sends in a ring all-reduce of `values` ternary codes laid out as `wire`: a packed
// wire's reduce-scatter step s carries the sums of s + 1 ranks, in fields as wide as the largest
// such sum, (s + 1) x 2L, needs; its all-gather carries the full words.
inline uint64_t ring_bytes_of_codes(int64_t values, const comm::TernaryWire& wire, int r, int p) {
  if (wire.bits == 0) return ring_bytes(values, static_cast<int64_t>(dtype_size(wire.dtype)), r, p);
  if (p == 1) return 0;
  const int64_t words = wire.elements(values);
  uint64_t bytes = 0;
  for (int s = 0; s < p - 1; ++s) {
    const int c = (r - s - 1 + 2 * p) % p;
    const int64_t first = words * c / p * wire.per_word;
    const int64_t last = std::min(values, words * (c + 1) / p * wire.per_word);
    const int width = std::bit_width(static_cast<uint64_t>((s + 1) * 2 * wire.levels));
    const int64_t per_word = 63 / width;
    bytes +=
        8 * static_cast<uint64_t>((std::max<int64_t>(0, last - first) + per_word - 1) / per_word);
    const int g = (r - s + p) % p;  // the all-gather's chunk of this step
    bytes += 8 * static_cast<uint64_t>(words * (g + 1) / p - words * g / p);
  }
  return bytes;
}

// True when `t` holds the same values on every rank: its maximum and its minimum over the ranks
// are both this rank's values.
inline bool identical_on_every_rank(const Tensor& t) {
  Tensor largest = t.to(DType::f32).clone(), negated = neg(t.to(DType::f32));
  world().all_reduce(largest, comm::ReduceOp::max)->wait();
  world().all_reduce(negated, comm::ReduceOp::max)->wait();
  auto mine = t.to(DType::f32).to_vector(), high = largest.to_vector(), low = negated.to_vector();
  for (size_t j = 0; j < mine.size(); ++j) {
    if (high[j] != mine[j] || -low[j] != mine[j]) return false;
  }
  return true;
}

}  // namespace pac::testing
