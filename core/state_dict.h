// StateDict: named tensors that make up an object's state between steps, for checkpoints: an
// optimizer's moments, a compressor's error-feedback residuals and step counters, a pruning
// criterion's running sums. Counters are stored as one-element i64 tensors.
//
// StateReader restores one with the checks a checkpoint loader owes its user: a missing entry, a
// wrong shape and an entry nobody asked for are all errors that name the owner and the entry.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "core/tensor.h"

namespace pac {

using StateDict = std::map<std::string, Tensor>;

// A one-element i64 tensor holding `value`.
Tensor counter_tensor(int64_t value);

class StateReader {
 public:
  // `owner` names what the state belongs to in error messages ("compressor topk").
  StateReader(std::string owner, const StateDict& state);

  bool has(const std::string& key) const;
  // Whether the entry exists with this shape (a reader that accepts an older layout asks first).
  bool has_shape(const std::string& key, const Shape& shape) const;
  // The entry, which must exist and have `shape` and `dtype`; the caller gets a copy.
  Tensor tensor(const std::string& key, const Shape& shape, DType dtype = DType::f32);
  int64_t counter(const std::string& key);
  // Copies the entry into `into` (same shape and dtype).
  void copy_into(const std::string& key, Tensor into);
  // The entries under `prefix`, with it removed, for another reader (a part's own state); they
  // count as read here.
  StateDict section(const std::string& prefix);
  // Throws if an entry was never read: the state came from something else.
  void finish() const;

 private:
  std::string owner_;
  const StateDict& state_;
  std::set<std::string> read_;
};

// Prefixes every key of `inner` with `prefix` and adds it to `out`.
void add_prefixed(StateDict& out, const std::string& prefix, const StateDict& inner);
// The entries of `state` whose key starts with `prefix`, with the prefix removed.
StateDict with_prefix(const StateDict& state, const std::string& prefix);

}  // namespace pac
