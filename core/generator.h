// Generator: a seeded random number generator (xoshiro256**) whose whole state is four words,
// so runs are reproducible and a checkpoint can save and restore it exactly.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace pac {

class Tensor;
using Shape = std::vector<int64_t>;

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);

  uint64_t next_u64();
  float uniform();                 // [0, 1)
  float normal();                  // mean 0, std 1 (Box-Muller)
  uint64_t below(uint64_t bound);  // uniform integer in [0, bound), unbiased
  std::vector<int64_t> permutation(int64_t n);

  // Tensor factories drawing from this generator.
  Tensor randn(const Shape& shape, float mean = 0.0f, float std = 1.0f);
  Tensor rand(const Shape& shape, float low = 0.0f, float high = 1.0f);
  Tensor bernoulli(const Shape& shape, float p);  // f32 zeros and ones

  using State = std::array<uint64_t, 4>;
  State state() const { return state_; }
  void set_state(const State& state) { state_ = state; }

 private:
  State state_{};
};

// The process-wide generator used for parameter initialisation and data order unless a caller
// passes its own; seed it with default_generator().manual_seed(seed).
Generator& default_generator();

}  // namespace pac
