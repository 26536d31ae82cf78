#include "optim/optimizer.h"

#include "core/autograd.h"

namespace pac::optim {

Optimizer::Optimizer(NamedParameters params, float lr)
    : params_(std::move(params)),
      slots_(params_.size()),
      mask_versions_(params_.size(), 0),
      lr_(lr) {
  PAC_CHECK(lr >= 0.0f, "optimizer: learning rate must be >= 0, got {}", lr);
}

void Optimizer::step() {
  NoGradGuard no_grad;
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i].second;
    if (p.mask_version() != mask_versions_[i]) {
      // A new mask: the state at newly pruned entries must not survive to revive them.
      for (auto& [slot, t] : slots_[i]) {
        if (t.shape() == p.shape()) p.apply_mask(t);
      }
      mask_versions_[i] = p.mask_version();
    }
    GradientView view;
    const Tensor& compact = p.compact_grad();
    Tensor dense = p.grad();
    if (compact.defined()) {
      view.values = compact.data<float>();
      view.positions = p.has_mask() ? p.kept().data<int32_t>() : nullptr;
      view.count = compact.numel();
    } else if (dense.defined()) {
      view.values = dense.data<float>();
      view.count = dense.numel();
      view.mask = p.has_mask() ? p.mask().data<uint8_t>() : nullptr;
    } else {
      continue;
    }
    update(p, view, slots_[i]);
  }
}

void Optimizer::zero_grad() {
  NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    Tensor g = p->grad();
    if (g.defined()) g.zero_();
    p->set_compact_grad(Tensor());
  }
}

void Optimizer::reset_state() {
  for (auto& slots : slots_) slots.clear();
}

std::map<std::string, Tensor> Optimizer::state() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const auto& [slot, t] : slots_[i]) out[params_[i].first + "." + slot] = t;
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
      PAC_CHECK(it->second.shape() == params_[i].second->shape() || slot == "step",
                "optimizer state: '{}' is {}, parameter is {}", it->first, it->second.str(),
                shape_str(params_[i].second->shape()));
      // Per-entry state lives with its parameter; scalar slots ("step") stay on the host.
      Device device = slot == "step" ? Device::cpu() : params_[i].second->data().device();
      loaded[i][slot] = it->second.clone().to(device);
      ++used;
    }
  }
  PAC_CHECK(used == state.size(),
            "optimizer state: {} entries do not belong to any parameter of this model",
            state.size() - used);
  slots_ = std::move(loaded);
  steps_ = static_cast<int64_t>(step->second.item());
}

}  // namespace pac::optim
