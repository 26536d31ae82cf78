#include "apps/outer_sync.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/option_reader.h"

namespace pac {

SyncOptions parse_sync(const std::string& spec) {
  SyncOptions o;
  if (spec == "step") return o;
  const std::vector<std::string> parts = split_fields(spec, ':');
  const std::string& kind = parts[0];
  PAC_CHECK((kind == "local" || kind == "diloco") && parts.size() >= 2,
            "--sync '{}' is not known; expected step, local:H, diloco:H or "
            "diloco:H:fragments=F[:mix=A] (H: steps between synchronisations)",
            spec);
  auto number = [&](const std::string& text, const char* what) {
    const std::optional<double> v = parse_number(text);
    PAC_CHECK(v, "--sync '{}': {} must be a number, got '{}'", spec, what, text);
    return *v;
  };
  const double every = number(parts[1], "H");
  PAC_CHECK(every == std::floor(every), "--sync '{}': H must be a whole number of steps", spec);
  o.every = static_cast<int64_t>(every);
  PAC_CHECK(o.every >= 1, "--sync '{}': H must be at least 1", spec);
  bool mix_given = false;
  for (size_t i = 2; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq);
    PAC_CHECK(kind == "diloco" && eq != std::string::npos && (key == "fragments" || key == "mix"),
              "--sync '{}': '{}' is not an option here; diloco:H takes fragments=F and mix=A", spec,
              parts[i]);
    const double v = number(parts[i].substr(eq + 1), key.c_str());
    if (key == "fragments") {
      PAC_CHECK(v >= 1 && v == std::floor(v) && o.every % static_cast<int64_t>(v) == 0,
                "--sync '{}': fragments must be a whole number from 1 that divides H", spec);
      o.fragments = static_cast<int64_t>(v);
    } else {
      PAC_CHECK(v >= 0.0 && v <= 1.0, "--sync '{}': mix must be in [0, 1]", spec);
      o.mix = static_cast<float>(v);
      mix_given = true;
    }
  }
  PAC_CHECK(!mix_given || o.fragments > 0, "--sync '{}': mix applies with fragments=F", spec);
  o.kind = kind;
  return o;
}

OuterSync::OuterSync(nn::Module& model, comm::Reducer& reducer, comm::ProcessGroupPtr group,
                     const SyncOptions& options,
                     std::unique_ptr<comm::Compressor> stream_compressor)
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
  if (options.fragments > 0) {
    PAC_CHECK(diloco, "OuterSync: fragments apply to diloco");
    stream_ = std::make_unique<StreamingDiLoCo>(
        params_, anchor_, group_, std::move(stream_compressor), options.every, options.fragments,
        options.outer_lr, options.outer_momentum, options.mix);
  }
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
  return !stream_ && pending_ > 0 && (steps_done - options_.warmup) % options_.every == 0;
}

bool OuterSync::turn_due(int64_t steps_done) const {
  return stream_ && pending_ > 0 && stream_->turn(steps_done - options_.warmup);
}

comm::ReducerStepStats OuterSync::after_local_step(int64_t steps_done) {
  if (!turn_due(steps_done)) return {};
  return stream_->step(steps_done - options_.warmup);
}

void OuterSync::after_prune(bool rewound) {
  PAC_CHECK(pending_ == 0, "OuterSync: pruned {} local steps after a synchronisation", pending_);
  for (size_t i = 0; i < params_.size(); ++i) anchor_[i].copy_(params_[i].second->data());
  if (!rewound) return;
  if (stream_)
    stream_->reset_outer_state();
  else
    outer_->reset_state();
}

StateDict OuterSync::state() const {
  PAC_CHECK(pending_ == 0, "OuterSync: state() taken {} local steps after a synchronisation",
            pending_);
  return stream_ ? stream_->state() : outer_->state();
}

void OuterSync::load_state(const StateDict& state) {
  if (stream_)
    stream_->load_state(state);
  else
    outer_->load_state(state);
  for (size_t i = 0; i < params_.size(); ++i) anchor_[i].copy_(params_[i].second->data());
  pending_ = 0;
}

comm::ReducerStepStats OuterSync::synchronise(bool with_buffers) {
  NoGradGuard no_grad;
  if (stream_) {
    comm::ReducerStepStats stats = stream_->synchronise_all();
    if (with_buffers) stats.bytes_sent += average_buffers();
    pending_ = 0;
    return stats;
  }
  reducer_.set_paused(false);
  // The buffers first; the Reducer counts its own collectives only, so they are added below.
  const uint64_t buffer_bytes = with_buffers ? average_buffers() : 0;
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
  pending_ = 0;
  stats.bytes_sent += buffer_bytes;
  return stats;
}

uint64_t OuterSync::average_buffers() {
  if (group_->size() == 1) return 0;
  const uint64_t before = group_->bytes_sent();
  std::vector<comm::WorkPtr> pending;
  for (auto& [name, b] : model_.named_buffers()) {
    if (b.dtype() == DType::f32 && !options_.unshared_buffers.count(name))
      pending.push_back(group_->all_reduce(b, comm::ReduceOp::avg));
  }
  for (auto& w : pending) w->wait();
  return group_->bytes_sent() - before;
}

}  // namespace pac
