#include "optim/optimizer.h"

#include <limits>

#include "core/autograd.h"

namespace pac::optim {

namespace {

constexpr uint64_t kUnknownLayout = std::numeric_limits<uint64_t>::max();

bool per_entry(const std::string& slot) { return slot != "step"; }

// Moves per-entry state from one kept set to another (undefined: all `numel` positions, in
// `shape`): entries kept in both keep their value, the others start at zero. Both sets are
// ascending, so one merge walk does it. Masks change rarely; this runs on the host.
Tensor relayout(const Tensor& state, const Tensor& from_kept, const Tensor& to_kept,
                const Shape& shape) {
  const int64_t numel = shape_numel(shape);
  Tensor from_host = from_kept.defined() ? from_kept.cpu() : Tensor();
  Tensor to_host = to_kept.defined() ? to_kept.cpu() : Tensor();
  auto position = [&](const Tensor& kept, int64_t j) -> int64_t {
    return kept.defined() ? kept.data<int32_t>()[j] : j;
  };
  const int64_t from_count = from_host.defined() ? from_host.numel() : numel;
  const int64_t to_count = to_host.defined() ? to_host.numel() : numel;
  Tensor old_values = state.cpu();
  Tensor out = Tensor::zeros(to_host.defined() ? Shape{to_count} : shape);
  const float* in = old_values.data<float>();
  float* o = out.data<float>();
  for (int64_t a = 0, b = 0; a < from_count && b < to_count;) {
    int64_t pa = position(from_host, a), pb = position(to_host, b);
    if (pa == pb)
      o[b++] = in[a++];
    else if (pa < pb)
      ++a;
    else
      ++b;
  }
  return out.to(state.device());
}

}  // namespace

Optimizer::Optimizer(NamedParameters params, float lr)
    : params_(std::move(params)),
      slots_(params_.size()),
      lr_(lr),
      state_kept_(params_.size()),
      state_mask_version_(params_.size(), kUnknownLayout) {
  PAC_CHECK(lr >= 0.0f, "optimizer: learning rate must be >= 0, got {}", lr);
}

void Optimizer::follow_mask(size_t i) {
  nn::Parameter& p = *params_[i].second;
  if (state_mask_version_[i] == p.mask_version()) return;
  Tensor now_kept = p.has_mask() ? p.kept() : Tensor();
  const bool both_dense = !state_kept_[i].defined() && !now_kept.defined();
  for (auto& [slot, t] : slots_[i]) {
    if (per_entry(slot) && !both_dense) t = relayout(t, state_kept_[i], now_kept, p.shape());
  }
  state_kept_[i] = now_kept;
  state_mask_version_[i] = p.mask_version();
}

void Optimizer::step() {
  NoGradGuard no_grad;
  MemoryTagScope tag(MemoryTag::optimizer);
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i].second;
    follow_mask(i);
    Tensor g = p.grad();
    if (!g.defined()) continue;
    GradientView view;
    view.values = g.data<float>();
    view.positions = p.has_mask() ? p.kept().data<int32_t>() : nullptr;
    view.count = g.numel();
    update(p, view, slots_[i]);
  }
}

void Optimizer::zero_grad() {
  NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    Tensor g = p->grad();
    if (g.defined()) g.zero_();
  }
}

void Optimizer::reset_state() {
  for (auto& slots : slots_) slots.clear();
}

std::map<std::string, Tensor> Optimizer::state() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const nn::Parameter& p = *params_[i].second;
    for (const auto& [slot, t] : slots_[i]) {
      // In the parameter's shape, whatever layout the state has now.
      Tensor saved = t;
      if (per_entry(slot))
        saved = state_kept_[i].defined() ? relayout(t, state_kept_[i], Tensor(), p.shape())
                                         : t.reshape(p.shape());
      out[params_[i].first + "." + slot] = saved;
    }
  }
  out["step"] = Tensor::full({1}, static_cast<float>(steps_));
  return out;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& state) {
  auto step = state.find("step");
  PAC_CHECK(step != state.end(), "optimizer state: missing 'step'");
  size_t used = 1;
  std::vector<std::map<std::string, Tensor>> loaded(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = params_[i].first + ".";
    for (auto it = state.lower_bound(prefix); it != state.end() && it->first.rfind(prefix, 0) == 0;
         ++it) {
      std::string slot = it->first.substr(prefix.size());
      if (slot.find('.') != std::string::npos) continue;  // belongs to a longer parameter name
      PAC_CHECK(it->second.shape() == params_[i].second->shape() || !per_entry(slot),
                "optimizer state: '{}' is {}, parameter is {}", it->first, it->second.str(),
                shape_str(params_[i].second->shape()));
      // Per-entry state lives with its parameter; scalar slots ("step") stay on the host.
      Device device = per_entry(slot) ? params_[i].second->data().device() : Device::cpu();
      loaded[i][slot] = it->second.clone().to(device);
      ++used;
    }
  }
  PAC_CHECK(used == state.size(),
            "optimizer state: {} entries do not belong to any parameter of this model",
            state.size() - used);
  slots_ = std::move(loaded);
  steps_ = static_cast<int64_t>(step->second.item());
  // Loaded in the parameters' shapes: the next step gathers the kept entries of masked ones.
  for (size_t i = 0; i < params_.size(); ++i) {
    state_kept_[i] = Tensor();
    state_mask_version_[i] = kUnknownLayout;
  }
}

}  // namespace pac::optim
