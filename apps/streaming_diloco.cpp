#include "apps/streaming_diloco.h"

#include <cmath>
#include <cstdio>

#include "core/autograd.h"
#include "core/ops.h"

namespace pac {

// A fragment's pseudo-gradient on its way: the buckets the compressor reduces in place, and for
// each compact entry the kept positions it was gathered at (masks may change before it lands).
struct StreamingDiLoCo::InFlight {
  size_t fragment = 0;
  std::vector<comm::Bucket> buckets;
  std::vector<std::vector<Tensor>> kept;  // per bucket, per entry; undefined when dense
  std::vector<comm::WorkPtr> work;
  // The rank's byte count when the all-reduce started: what it sent until the all-reduce landed
  // is what the fragment cost, however far the background sends had got at any one time.
  uint64_t bytes_at_launch = 0;
};

StreamingDiLoCo::StreamingDiLoCo(const optim::NamedParameters& params, std::vector<Tensor>& anchor,
                                 comm::ProcessGroupPtr group,
                                 std::unique_ptr<comm::Compressor> compressor, int64_t every,
                                 int64_t fragments, float outer_lr, float outer_momentum, float mix)
    : params_(params),
      anchor_(anchor),
      group_(std::move(group)),
      compressor_(std::move(compressor)),
      interval_(every / fragments),
      mix_(mix) {
  PAC_CHECK(compressor_ != nullptr, "streaming DiLoCo needs a compressor for its all-reduces");
  PAC_CHECK(
      fragments >= 1 && every % fragments == 0 && fragments <= static_cast<int64_t>(params.size()),
      "streaming DiLoCo: {} fragments of {} parameters, every {} steps; expected at least "
      "one parameter per fragment and H a multiple of the fragments",
      fragments, params.size(), every);
  // Consecutive parameters, about the same number of values in each fragment.
  int64_t total = 0;
  for (const auto& [name, p] : params) total += p->numel();
  fragments_.resize(static_cast<size_t>(fragments));
  size_t f = 0;
  int64_t seen = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    fragments_[f].params.push_back(i);
    seen += params[i].second->numel();
    // A fragment closes at its share of the values, or when each one still to come needs one of
    // the parameters left.
    const size_t fragments_left = fragments_.size() - f - 1;
    if (fragments_left > 0 && (seen * fragments >= total * static_cast<int64_t>(f + 1) ||
                               params.size() - i - 1 == fragments_left))
      ++f;
  }
  for (auto& fragment : fragments_) {
    optim::NamedParameters mine;
    for (size_t i : fragment.params) mine.push_back(params_[i]);
    fragment.outer = std::make_unique<optim::Sgd>(
        mine, optim::SgdOptions{outer_lr, outer_momentum, 0.0f, 0.0f, outer_momentum > 0.0f});
  }
}

StreamingDiLoCo::~StreamingDiLoCo() {
  // Work still queued refers to the buckets: let it finish before they go. This runs only when
  // the run is already ending on an error (a finished run synchronises everything first), so a
  // second error from this wait is reported on stderr and the first one goes on up.
  if (!in_flight_) return;
  for (auto& w : in_flight_->work) {
    try {
      w->wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "streaming DiLoCo: the all-reduce in flight failed too: %s\n", e.what());
    }
  }
}

int64_t StreamingDiLoCo::fragment_of(size_t i) const {
  for (size_t f = 0; f < fragments_.size(); ++f) {
    for (size_t j : fragments_[f].params)
      if (j == i) return static_cast<int64_t>(f);
  }
  PAC_FAIL("streaming DiLoCo: parameter {} is in no fragment", i);
}

std::vector<comm::Bucket> StreamingDiLoCo::make_fragment_buckets(size_t fragment) const {
  optim::NamedParameters mine;
  for (size_t i : fragments_[fragment].params) mine.push_back(params_[i]);
  std::vector<comm::Bucket> buckets = comm::make_buckets(mine, comm::ReducerOptions{});
  // Indices unique across fragments: the compressor keeps its state per bucket index.
  for (auto& b : buckets) b.index += static_cast<int>(fragment) * 1024;
  return buckets;
}

void StreamingDiLoCo::launch(size_t fragment) {
  NoGradGuard no_grad;
  in_flight_ = std::make_unique<InFlight>();
  InFlight& f = *in_flight_;
  f.fragment = fragment;
  f.buckets = make_fragment_buckets(fragment);
  f.bytes_at_launch = group_->bytes_sent();
  std::map<const nn::Parameter*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].second.get()] = i;
  for (auto& bucket : f.buckets) {
    std::vector<uint64_t> versions;
    std::vector<Tensor> kept;
    for (const auto& e : bucket.entries) {
      const size_t i = index.at(e.param.get());
      Tensor delta = sub(anchor_[i], e.param->data());
      Tensor slot = bucket.flat.view_flat(e.offset, {e.numel});
      if (e.compact) {
        index_gather_(slot, delta, e.param->kept());
        kept.push_back(e.param->kept().clone());
      } else {
        slot.copy_(reshape(delta, {e.numel}));
        kept.emplace_back();
      }
      versions.push_back(e.param->mask_version());
    }
    f.kept.push_back(std::move(kept));
    auto seen = mask_versions_.find(bucket.index);
    if (seen != mask_versions_.end() && seen->second != versions)
      compressor_->layout_changed(bucket);
    mask_versions_[bucket.index] = versions;
  }
  // The buckets stay where they are from here on: the compressor's work refers to them.
  for (auto& bucket : f.buckets) f.work.push_back(compressor_->reduce(bucket, *group_));
}

uint64_t StreamingDiLoCo::apply(bool merge) {
  NoGradGuard no_grad;
  InFlight& f = *in_flight_;
  for (auto& w : f.work) w->wait();
  const uint64_t sent = group_->bytes_sent() - f.bytes_at_launch;
  compressor_->end_step(true);
  std::map<const nn::Parameter*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].second.get()] = i;
  std::vector<std::pair<size_t, Tensor>> local;  // each parameter's own values, to mix with
  for (size_t b = 0; b < f.buckets.size(); ++b) {
    const comm::Bucket& bucket = f.buckets[b];
    for (size_t e = 0; e < bucket.entries.size(); ++e) {
      const comm::BucketEntry& entry = bucket.entries[e];
      nn::Parameter& p = *entry.param;
      const size_t i = index.at(&p);
      Tensor average = bucket.flat.view_flat(entry.offset, {entry.numel});
      for (float v : average.cpu().to_vector()) {
        PAC_CHECK(std::isfinite(v),
                  "the averaged pseudo-gradient of '{}' is not finite; the run stops", entry.name);
      }
      // Into the gradient as it is laid out now, through the dense shape: a mask may have
      // changed since the values were gathered.
      Tensor dense = Tensor::zeros({p.numel()}, DType::f32, p.data().device());
      if (entry.compact)
        index_scatter_(dense, average, f.kept[b][e]);
      else
        dense.copy_(average);
      Tensor g = p.grad();
      if (p.has_mask())
        index_gather_(g, dense, p.kept());
      else
        g.copy_(reshape(dense, g.shape()));
      local.emplace_back(i, p.data().clone());
      Tensor data = p.data();
      data.copy_(anchor_[i]);
    }
  }
  fragments_[f.fragment].outer->step();
  for (auto& [i, mine] : local) {
    nn::Parameter& p = *params_[i].second;
    Tensor data = p.data();
    anchor_[i].copy_(data);
    if (merge) {
      scale_(data, 1.0f - mix_);
      axpy_(data, mix_, mine);
      p.apply_mask(data);
    }
  }
  in_flight_.reset();
  return sent;
}

comm::ReducerStepStats StreamingDiLoCo::step(int64_t local_steps) {
  comm::ReducerStepStats stats;
  if (!turn(local_steps)) return stats;
  if (in_flight_) stats.bytes_sent = apply(true);
  launch(next_);
  next_ = (next_ + 1) % fragments_.size();
  return stats;
}

comm::ReducerStepStats StreamingDiLoCo::synchronise_all() {
  comm::ReducerStepStats stats;
  if (in_flight_) stats.bytes_sent = apply(true);
  for (size_t f = 0; f < fragments_.size(); ++f) {
    launch(f);
    stats.bytes_sent += apply(false);
  }
  return stats;
}

void StreamingDiLoCo::reset_outer_state() {
  PAC_CHECK(!in_flight_, "streaming DiLoCo: the outer state reset with a fragment in flight");
  for (auto& f : fragments_) f.outer->reset_state();
}

StateDict StreamingDiLoCo::state() const {
  PAC_CHECK(!in_flight_, "streaming DiLoCo: state() with a fragment in flight");
  StateDict out;
  for (size_t f = 0; f < fragments_.size(); ++f)
    add_prefixed(out, "fragment" + std::to_string(f) + ".", fragments_[f].outer->state());
  add_prefixed(out, "compressor.", compressor_->state());
  StateDict next;
  next["next"] = Tensor::from_indices({static_cast<int64_t>(next_)}, {1});
  add_prefixed(out, "turn.", next);
  return out;
}

void StreamingDiLoCo::load_state(const StateDict& state) {
  StateReader read("streaming DiLoCo", state);
  for (size_t f = 0; f < fragments_.size(); ++f)
    fragments_[f].outer->load_state(read.section("fragment" + std::to_string(f) + "."));
  std::vector<comm::Bucket> buckets;
  for (size_t f = 0; f < fragments_.size(); ++f) {
    for (auto& b : make_fragment_buckets(f)) buckets.push_back(std::move(b));
  }
  compressor_->load_state(read.section("compressor."), buckets, *group_);
  StateDict turn = read.section("turn.");
  PAC_CHECK(turn.count("next") && turn.at("next").numel() == 1,
            "streaming DiLoCo: the checkpoint has no turn");
  const int64_t next = static_cast<int64_t>(turn.at("next").cpu().to_vector()[0]);
  PAC_CHECK(next >= 0 && next < fragments(),
            "streaming DiLoCo: the checkpoint's turn {} is not one of {} fragments", next,
            fragments());
  next_ = static_cast<size_t>(next);
  read.finish();
}

}  // namespace pac
