#include "core/state_dict.h"

#include "core/autograd.h"

#include <cstring>
#include <utility>

#include "core/error.h"

namespace pac {

Tensor counter_tensor(int64_t value) {
  Tensor t = Tensor::empty({1}, DType::i64);
  t.data<int64_t>()[0] = value;
  return t;
}

StateReader::StateReader(std::string owner, const StateDict& state)
    : owner_(std::move(owner)), state_(state) {}

bool StateReader::has(const std::string& key) const { return state_.count(key) != 0; }

bool StateReader::has_shape(const std::string& key, const Shape& shape) const {
  auto it = state_.find(key);
  return it != state_.end() && it->second.shape() == shape;
}

Tensor StateReader::tensor(const std::string& key, const Shape& shape, DType dtype) {
  auto it = state_.find(key);
  PAC_CHECK(it != state_.end(), "{}: the saved state has no '{}'", owner_, key);
  PAC_CHECK(it->second.shape() == shape && it->second.dtype() == dtype,
            "{}: saved '{}' is {}, expected {} {}", owner_, key, it->second.str(),
            dtype_name(dtype), shape_str(shape));
  read_.insert(key);
  return it->second.clone();
}

int64_t StateReader::counter(const std::string& key) {
  return tensor(key, {1}, DType::i64).data<int64_t>()[0];
}

void StateReader::copy_into(const std::string& key, Tensor into) {
  Tensor saved = tensor(key, into.shape(), into.dtype());
  NoGradGuard no_grad;
  into.copy_(saved);  // `into` may be on the GPU
}

StateDict StateReader::section(const std::string& prefix) {
  StateDict out = with_prefix(state_, prefix);
  for (const auto& [key, value] : out) read_.insert(prefix + key);
  return out;
}

void StateReader::finish() const {
  for (const auto& [key, value] : state_) {
    PAC_CHECK(read_.count(key), "{}: the saved state holds '{}', which it does not use", owner_,
              key);
  }
}

void add_prefixed(StateDict& out, const std::string& prefix, const StateDict& inner) {
  for (const auto& [key, value] : inner) out[prefix + key] = value;
}

StateDict with_prefix(const StateDict& state, const std::string& prefix) {
  StateDict out;
  for (auto it = state.lower_bound(prefix); it != state.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    out[it->first.substr(prefix.size())] = it->second;
  }
  return out;
}

}  // namespace pac
