#include "apps/outer_sync.h"

#include "core/autograd.h"
#include "core/ops.h"

namespace pac {

SyncOptions parse_sync(const std::string& spec) {
  SyncOptions o;
  if (spec == "step") return o;
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  PAC_CHECK((kind == "local" || kind == "diloco") && colon != std::string::npos,
            "--sync '{}' is not known; expected step, local:H or diloco:H (H: steps between "
            "synchronisations)",
            spec);
  try {
    size_t end = 0;
    o.every = std::stoll(spec.substr(colon + 1), &end);
    PAC_CHECK(end == spec.size() - colon - 1, "");
  } catch (const std::exception&) {
    PAC_FAIL("--sync '{}': H must be a whole number of steps", spec);
  }
  PAC_CHECK(o.every >= 1, "--sync '{}': H must be at least 1", spec);
  o.kind = kind;
  return o;
}

OuterSync::OuterSync(nn::Module& model, comm::Reducer& reducer, comm::ProcessGroupPtr group,
                     const SyncOptions& options)
    : model_(model),
      reducer_(reducer),
      group_(std::move(group)),
      options_(options),
      params_(model.named_parameters()) {
  PAC_CHECK(options.kind == "local" || options.kind == "diloco",
            "OuterSync: kind must be local or diloco, got '{}'", options.kind);
  PAC_CHECK(options.warmup >= 0, "--sync-warmup must be >= 0, got {}", options.warmup);
  // Averaging is the outer step with learning rate 1 and no momentum: anchor - mean(anchor - x).
  const bool diloco = options.kind == "diloco";
  PAC_CHECK(!diloco || (options.outer_lr > 0.0f && options.outer_momentum >= 0.0f &&
                        options.outer_momentum < 1.0f),
            "--outer-lr must be > 0 and --outer-momentum in [0, 1), got {} and {}",
            options.outer_lr, options.outer_momentum);
  optim::SgdOptions outer{diloco ? options.outer_lr : 1.0f, diloco ? options.outer_momentum : 0.0f,
                          0.0f, 0.0f, diloco && options.outer_momentum > 0.0f};
  outer_ = std::make_unique<optim::Sgd>(params_, outer);
  for (const auto& [name, p] : params_) anchor_.push_back(p->data().clone());
}

bool OuterSync::begin_step(int64_t step) {
  const bool local = step >= options_.warmup;
  if (step == options_.warmup) {
    // The warm-up's synchronous steps left every rank with the same parameters.
    for (size_t i = 0; i < params_.size(); ++i) anchor_[i].copy_(params_[i].second->data());
  }
  reducer_.set_paused(local);
  if (local) ++pending_;
  return local;
}

bool OuterSync::due(int64_t steps_done) const {
  return pending_ > 0 && (steps_done - options_.warmup) % options_.every == 0;
}

void OuterSync::masks_changed() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].second->apply_mask(anchor_[i]);
}

StateDict OuterSync::state() const {
  PAC_CHECK(pending_ == 0, "OuterSync: state() taken {} local steps after a synchronisation",
            pending_);
  return outer_->state();
}

void OuterSync::load_state(const StateDict& state) {
  outer_->load_state(state);
  for (size_t i = 0; i < params_.size(); ++i) anchor_[i].copy_(params_[i].second->data());
  pending_ = 0;
}

comm::ReducerStepStats OuterSync::synchronise() {
  NoGradGuard no_grad;
  reducer_.set_paused(false);
  // The pseudo-gradient, anchor - local, into each gradient (compact where a mask is: the same
  // kept entries on every rank, zero elsewhere).
  comm::ReducerStepStats stats = reducer_.reduce_now([&] {
    for (size_t i = 0; i < params_.size(); ++i) {
      nn::Parameter& p = *params_[i].second;
      Tensor delta = sub(anchor_[i], p.data());
      Tensor g = p.grad();
      if (p.has_mask())
        index_gather_(g, delta, p.kept());
      else
        g.copy_(delta);
    }
  });
  PAC_CHECK(!stats.nonfinite,
            "the averaged pseudo-gradient of '{}' is not finite on rank {}; the run stops",
            stats.nonfinite_in, stats.nonfinite_rank);
  // The outer step from the anchor; every rank then continues from its result.
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor data = params_[i].second->data();
    data.copy_(anchor_[i]);
  }
  outer_->step();
  for (size_t i = 0; i < params_.size(); ++i) anchor_[i].copy_(params_[i].second->data());
  if (group_->size() > 1) {
    std::vector<comm::WorkPtr> pending;
    for (auto& [name, b] : model_.named_buffers()) {
      if (b.dtype() == DType::f32) pending.push_back(group_->all_reduce(b, comm::ReduceOp::avg));
    }
    for (auto& w : pending) w->wait();
  }
  pending_ = 0;
  return stats;
}

}  // namespace pac
