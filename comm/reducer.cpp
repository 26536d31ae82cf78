#include "comm/reducer.h"

#include <chrono>
#include <cmath>
#include <map>
#include <string>

#include "comm/host_staging.h"
#include "core/autograd.h"
#include "core/cuda/kernels.h"
#include "layers/finite.h"

namespace pac::comm {

namespace {

// A layout made for no mask version: the first follow_masks() lays out every bucket.
constexpr uint64_t kNoLayout = UINT64_MAX;

// A bucket's flat buffer of `n` values, on its parameters' device: the gradients become views
// into it, and the passes over it are counted (passes over gradient memory are measured).
Tensor bucket_buffer(const Bucket& bucket, int64_t n) {
  Tensor flat = Tensor::zeros({n}, DType::f32, bucket.entries.front().param->data().device());
  flat.storage()->set_counted(true);
  return flat;
}

// Makes `view` (a slot in a bucket) the parameter's gradient, with the values it has so far.
void attach_gradient(nn::Parameter& p, Tensor view) {
  NoGradGuard no_grad;
  Tensor current = p.grad();
  if (current.defined()) view.copy_(current.reshape(view.shape()));
  p.set_grad(view);
}

}  // namespace

std::vector<Bucket> make_buckets(const std::vector<std::pair<std::string, nn::ParameterPtr>>& named,
                                 const ReducerOptions& options, bool allocate,
                                 const WireBytes& wire_bytes) {
  PAC_CHECK(options.bucket_mb > 0.0 && options.first_bucket_mb > 0.0,
            "reducer: bucket sizes must be positive, got {} MB and first {} MB", options.bucket_mb,
            options.first_bucket_mb);
  MemoryTagScope tag(MemoryTag::gradients);
  std::vector<Bucket> buckets;
  double cap_bytes = options.first_bucket_mb * 1024 * 1024;
  Bucket current;
  int64_t current_elements = 0;
  auto close_bucket = [&] {
    if (current.entries.empty()) return;
    current.index = static_cast<int>(buckets.size());
    if (allocate) current.flat = bucket_buffer(current, current_elements);
    buckets.push_back(std::move(current));
    current = Bucket();
    current_elements = 0;
    cap_bytes = options.bucket_mb * 1024 * 1024;
  };
  double current_wire = 0.0;
  for (auto it = named.rbegin(); it != named.rend(); ++it) {
    const auto& [name, p] = *it;
    current.entries.push_back({name, p, current_elements, p->grad_numel(), p->grad_is_compact()});
    current_elements += p->grad_numel();
    current_wire += wire_bytes ? wire_bytes(*p) : 4.0 * static_cast<double>(p->numel());
    if (current_wire >= cap_bytes) {
      close_bucket();
      current_wire = 0.0;
    }
  }
  close_bucket();
  return buckets;
}

Reducer::Reducer(nn::Module& model, ProcessGroupPtr group, std::unique_ptr<Compressor> compressor,
                 const ReducerOptions& options)
    : group_(std::move(group)), compressor_(std::move(compressor)), options_(options) {
  auto named = model.named_parameters();
  PAC_CHECK(!named.empty(), "reducer: the model has no parameters");
  Device device = named.front().second->data().device();
  // A compressor written for host memory still works on GPU buckets, through host copies.
  if (!device.is_cpu() && !compressor_->runs_on_gpu()) {
    compressor_ = stage_on_host(std::move(compressor_));
  }
  PAC_CHECK(device.is_cpu() || group_->size() == 1 || group_->backend() == "nccl",
            "reducer: GPU gradients need the nccl backend, not '{}'", group_->backend());

  // Every rank starts from rank 0's weights and buffers.
  {
    NoGradGuard no_grad;
    std::vector<WorkPtr> pending;
    for (auto& [name, p] : named) pending.push_back(group_->broadcast(p->data(), 0));
    for (auto& [name, b] : model.named_buffers()) pending.push_back(group_->broadcast(b, 0));
    for (auto& w : pending) w->wait();
  }

  // The flat buffers are made at the first step (follow_masks), once the masks of a pruning
  // event before it are installed: buffers made now would hold the dense gradient only to be
  // thrown away. From then on, every gradient is a view into its bucket.
  named_ = named;
  // The hooks stay on the parameters after the Reducer is gone (a hook cannot be removed); they
  // reach it through a weak pointer, so a backward pass after that finds no Reducer and does
  // nothing instead of touching freed memory.
  alive_ = std::make_shared<Reducer*>(this);
  std::weak_ptr<Reducer*> alive = alive_;
  for (size_t i = 0; i < named.size(); ++i) {
    named[i].second->data().register_grad_ready_hook([alive, i](Tensor&) {
      if (auto reducer = alive.lock()) (*reducer)->mark_ready(i);
    });
  }
  lay_out(make_buckets(named, options, /*allocate=*/false, wire_bytes()));
  bytes_at_step_start_ = group_->bytes_sent();
  exchanges_at_step_start_ = group_->exchanges();
  if (!device.is_cpu())
    gpu_nonfinite_ = Tensor::zeros({static_cast<int64_t>(named.size())}, DType::f32, device);
}

WireBytes Reducer::wire_bytes() const {
  return [this](const nn::Parameter& p) {
    return static_cast<double>(p.grad_numel()) *
           compressor_->wire_bytes_per_value(p, group_->size());
  };
}

void Reducer::lay_out(std::vector<Bucket> buckets) {
  buckets_ = std::move(buckets);
  std::map<const nn::Parameter*, size_t> registered;
  for (size_t i = 0; i < named_.size(); ++i) registered[named_[i].second.get()] = i;
  where_.assign(named_.size(), {0, 0});
  mask_versions_.clear();
  pending_.clear();
  ready_.clear();
  first_slot_.clear();
  int64_t slots = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t e = 0; e < buckets_[b].entries.size(); ++e) {
      where_[registered.at(buckets_[b].entries[e].param.get())] = {b, e};
      mask_versions_.push_back(kNoLayout);
    }
    pending_.push_back(static_cast<int64_t>(buckets_[b].entries.size()));
    ready_.emplace_back(buckets_[b].entries.size(), false);
    first_slot_.push_back(slots);
    slots += static_cast<int64_t>(buckets_[b].entries.size());
  }
  work_.assign(buckets_.size(), nullptr);
}

void Reducer::follow_masks() {
  MemoryTagScope tag(MemoryTag::gradients);
  // A mask changed what some gradients cost on the wire: the grouping is cut again, and where it
  // differs, every bucket is new (the compressor's per-bucket state goes with the old ones).
  size_t slot = 0;
  bool any_changed = false;
  for (const auto& bucket : buckets_) {
    for (const auto& entry : bucket.entries)
      any_changed = any_changed || mask_versions_[slot++] != entry.param->mask_version();
  }
  // An adopted grouping stays until a mask changes after it was adopted.
  bool adopted_still = !adopted_versions_.empty();
  slot = 0;
  for (const auto& bucket : buckets_) {
    for (const auto& entry : bucket.entries)
      adopted_still = adopted_still && adopted_versions_[slot++] == entry.param->mask_version();
  }
  adopted_versions_.clear();
  if (any_changed && !adopted_still) {
    std::vector<Bucket> grouping = make_buckets(named_, options_, /*allocate=*/false, wire_bytes());
    bool same = grouping.size() == buckets_.size();
    for (size_t b = 0; same && b < grouping.size(); ++b) {
      same = grouping[b].entries.size() == buckets_[b].entries.size();
      for (size_t e = 0; same && e < grouping[b].entries.size(); ++e)
        same = grouping[b].entries[e].param == buckets_[b].entries[e].param;
    }
    if (!same) {
      MemoryTagScope compressor_tag(MemoryTag::compressor);
      for (const auto& old : buckets_) {
        if (old.flat.defined()) compressor_->layout_changed(old);
      }
      lay_out(std::move(grouping));
    }
  }
  slot = 0;
  for (auto& bucket : buckets_) {
    bool masks_changed = false, sizes_changed = !bucket.flat.defined();
    for (const auto& entry : bucket.entries) {
      if (mask_versions_[slot++] != entry.param->mask_version()) masks_changed = true;
      sizes_changed = sizes_changed || entry.numel != entry.param->grad_numel() ||
                      entry.compact != entry.param->grad_is_compact();
    }
    if (!masks_changed) continue;
    if (sizes_changed) {
      // A new flat buffer for the new sizes.
      int64_t at = 0;
      for (auto& entry : bucket.entries) {
        entry.offset = at;
        entry.numel = entry.param->grad_numel();
        entry.compact = entry.param->grad_is_compact();
        at += entry.numel;
      }
      bucket.flat = bucket_buffer(bucket, at);
    }
    // A new mask gave the parameter a gradient of its own: back into the bucket with its values.
    for (auto& entry : bucket.entries)
      attach_gradient(*entry.param, bucket.flat.view_flat(entry.offset, {entry.numel}));
    if (sizes_changed) {
      MemoryTagScope compressor_tag(MemoryTag::compressor);
      compressor_->layout_changed(bucket);
    }
  }
  slot = 0;
  for (const auto& bucket : buckets_) {
    for (const auto& entry : bucket.entries) mask_versions_[slot++] = entry.param->mask_version();
  }
}

ReducerStepStats Reducer::reduce_now(const std::function<void()>& fill) {
  PAC_CHECK(!paused_, "reducer: reduce_now() while paused");
  PAC_CHECK(!step_started_, "reducer: reduce_now() in the middle of a backward pass");
  start_step();
  declared_loss_finite_ = true;  // no loss: the verdict is the gradients'
  follow_masks();
  fill();
  for (size_t i = named_.size(); i-- > 0;) mark_ready(i);  // in backward's order
  return finalize(true);
}

Tensor Reducer::grouping() const {
  Tensor counts = Tensor::empty({static_cast<int64_t>(buckets_.size())}, DType::i64);
  for (size_t b = 0; b < buckets_.size(); ++b)
    counts.data<int64_t>()[b] = static_cast<int64_t>(buckets_[b].entries.size());
  return counts;
}

bool Reducer::adopt_grouping(const Tensor& counts) {
  PAC_CHECK(!step_started_, "reducer: adopt_grouping() in the middle of a backward pass");
  if (counts.dtype() != DType::i64 || counts.shape().size() != 1) return false;
  // The parameters in bucket order (reverse registration), whatever the grouping.
  std::vector<BucketEntry> order;
  for (const Bucket& b : make_buckets(named_, options_, /*allocate=*/false, wire_bytes())) {
    for (const BucketEntry& e : b.entries) order.push_back(e);
  }
  const Tensor host = counts.cpu();
  std::vector<Bucket> grouped;
  size_t at = 0;
  for (int64_t b = 0; b < host.numel(); ++b) {
    const int64_t count = host.data<int64_t>()[b];
    if (count <= 0 || at + static_cast<size_t>(count) > order.size()) return false;
    Bucket bucket;
    bucket.index = static_cast<int>(b);
    bucket.entries.assign(order.begin() + static_cast<std::ptrdiff_t>(at),
                          order.begin() + static_cast<std::ptrdiff_t>(at + count));
    at += static_cast<size_t>(count);
    grouped.push_back(std::move(bucket));
  }
  if (at != order.size()) return false;
  for (const Bucket& old : buckets_) {
    if (old.flat.defined()) compressor_->layout_changed(old);
  }
  lay_out(std::move(grouped));  // offsets and buffers follow at follow_masks()
  adopted_versions_.clear();
  for (const Bucket& bucket : buckets_) {
    for (const BucketEntry& e : bucket.entries)
      adopted_versions_.push_back(e.param->mask_version());
  }
  return true;
}

void Reducer::load_compressor_state(const StateDict& state) {
  follow_masks();
  MemoryTagScope tag(MemoryTag::compressor);
  compressor_->load_state(state, buckets_, *group_);
}

// The step's counts start at its first gradient: what the group sent before it (a pruning event's
// masks, the buffers shared for an evaluation, a checkpoint) is not this step's.
void Reducer::start_step() {
  step_started_ = true;
  bytes_at_step_start_ = group_->bytes_sent();
  verdict_bytes_at_step_start_ = group_->bytes_sent_for("verdict");
  exchanges_at_step_start_ = group_->exchanges();
}

void Reducer::mark_ready(size_t parameter) {
  if (paused_) return;
  // The first gradient of a step: masks change only between steps, so this is where the buckets
  // catch up with them, before any bucket is reduced.
  if (!step_started_) {
    start_step();
    follow_masks();
  }
  const auto [bucket, entry] = where_[parameter];
  PAC_CHECK(!ready_[bucket][entry],
            "reducer: '{}' received a second gradient before finalize(); call finalize() after "
            "every backward",
            buckets_[bucket].entries[entry].name);
  ready_[bucket][entry] = true;
  if (--pending_[bucket] == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  MemoryTagScope tag(MemoryTag::compressor);
  // Strictly in order, so every rank issues the same collectives in the same sequence.
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) {
    Bucket& bucket = buckets_[next_launch_];
    check_finite(bucket);
    const bool last = next_launch_ + 1 == buckets_.size();
    if (last) attach_verdict(bucket);
    work_[next_launch_] = compressor_->reduce(bucket, *group_);
    if (!bucket.riders.empty()) {  // a compressor that sends several collectives per bucket
      verdict_work_ = group_->all_reduce_coalesced(std::move(bucket.riders));
      bucket.riders.clear();
    }
    ++next_launch_;
  }
}

void Reducer::attach_verdict(Bucket& bucket) {
  if (group_->size() == 1 || !declared_loss_finite_ || bucket.flat.is_cuda()) return;
  if (nonfinite_in_.empty() && !*declared_loss_finite_) nonfinite_in_ = "loss";
  verdict_ = Tensor::full({1}, nonfinite_in_.empty() ? 0.0f : group_->rank() + 1.0f);
  bucket.riders.push_back({verdict_, ReduceOp::max, "verdict"});
  verdict_sent_ = true;
}

void Reducer::check_finite(const Bucket& bucket) {
  const float* g = bucket.flat.data<float>();
  const int64_t n = bucket.flat.numel();
  if (bucket.flat.is_cuda()) {  // counted per parameter on the device, read once in finalize()
    float* counts = gpu_nonfinite_.data<float>() + first_slot_[bucket.index];
    for (size_t e = 0; e < bucket.entries.size(); ++e) {
      cuda::add_statistic(cuda::Statistic::nonfinite_count, g + bucket.entries[e].offset,
                          bucket.entries[e].numel, counts + e);
    }
    return;
  }
  if (!nonfinite_in_.empty()) return;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(g[i])) continue;
    for (const auto& e : bucket.entries) {
      if (i >= e.offset && i < e.offset + e.numel) nonfinite_in_ = e.name;
    }
    return;
  }
}

ReducerStepStats Reducer::finalize(bool loss_is_finite) {
  if (!step_started_) {  // no gradient arrived (every parameter unused)
    start_step();
    follow_masks();
  }
  if (next_launch_ < buckets_.size()) {
    std::vector<std::string> missing;
    for (size_t b = next_launch_; b < buckets_.size(); ++b) {
      for (size_t e = 0; e < buckets_[b].entries.size(); ++e) {
        if (!ready_[b][e]) missing.push_back(buckets_[b].entries[e].name);
      }
    }
    PAC_CHECK(options_.allow_unused,
              "reducer: {} parameter(s) received no gradient this step (first: '{}'); every "
              "parameter must take part in the loss, or allow unused parameters",
              missing.size(), missing.empty() ? "" : missing.front());
    for (size_t b = next_launch_; b < buckets_.size(); ++b) pending_[b] = 0;
    launch_ready_buckets();  // unused gradients stay as they are (zero after zero_grad)
  }
  MemoryTagScope tag(MemoryTag::compressor);  // decoding, and the compressor's end of step
  const uint64_t exchanges_at_backward_end = group_->exchanges();
  auto start = std::chrono::steady_clock::now();
  double codec_before_wait = compressor_->codec_seconds();
  for (auto& w : work_) {
    w->wait();
    w.reset();
  }
  if (verdict_work_) verdict_work_->wait();
  verdict_work_.reset();
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double decode_in_wait = compressor_->codec_seconds() - codec_before_wait;

  ReducerStepStats stats;
  // The verdict: an all-reduce-max of (rank + 1) where this rank's own gradient or loss was not
  // finite, so every rank learns it, and which rank (with the last bucket where the loss was
  // declared, else on its own now); then the averaged gradients, which every rank holds alike,
  // for an overflow in the sum.
  if (gpu_nonfinite_.defined()) {
    auto found = gpu_nonfinite_.to_vector();
    for (size_t b = 0; b < buckets_.size() && nonfinite_in_.empty(); ++b) {
      for (size_t e = 0; e < buckets_[b].entries.size(); ++e) {
        if (found[first_slot_[b] + e] > 0.0f && nonfinite_in_.empty())
          nonfinite_in_ = buckets_[b].entries[e].name;
      }
    }
    gpu_nonfinite_.zero_();
  }
  Tensor flag = verdict_;
  if (verdict_sent_) {
    PAC_CHECK(*declared_loss_finite_ == loss_is_finite,
              "reducer: finalize() was told the loss is {}finite, but declare_loss_finite() said "
              "it is {}finite",
              loss_is_finite ? "" : "not ", *declared_loss_finite_ ? "" : "not ");
  } else {
    if (nonfinite_in_.empty() && !loss_is_finite) nonfinite_in_ = "loss";
    flag = Tensor::full({1}, nonfinite_in_.empty() ? 0.0f : group_->rank() + 1.0f);
    if (group_->size() > 1)
      group_->all_reduce_coalesced({{flag, ReduceOp::max, "verdict"}})->wait();
  }
  stats.nonfinite_rank = static_cast<int>(flag.item()) - 1;
  stats.nonfinite_in = nonfinite_in_;
  if (stats.nonfinite_rank < 0) stats.nonfinite_in = nn::first_nonfinite_gradient(named_);
  stats.nonfinite = stats.nonfinite_rank >= 0 || !stats.nonfinite_in.empty();
  compressor_->end_step(!stats.nonfinite);
  nonfinite_in_.clear();
  stats.bytes_sent = group_->bytes_sent() - bytes_at_step_start_;
  stats.verdict_bytes = group_->bytes_sent_for("verdict") - verdict_bytes_at_step_start_;
  stats.codec_s = compressor_->codec_seconds() - codec_at_step_start_;
  stats.comm_exposed_s = std::max(0.0, waited - decode_in_wait);
  stats.codec_kernels = compressor_->kernels() - kernels_at_step_start_;
  stats.exchanges = group_->exchanges() - exchanges_at_step_start_;
  stats.exchanges_after_backward = group_->exchanges() - exchanges_at_backward_end;
  exchanges_at_step_start_ = group_->exchanges();
  kernels_at_step_start_ = compressor_->kernels();
  bytes_at_step_start_ = group_->bytes_sent();
  codec_at_step_start_ = compressor_->codec_seconds();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = static_cast<int64_t>(buckets_[b].entries.size());
    ready_[b].assign(ready_[b].size(), false);
  }
  next_launch_ = 0;
  step_started_ = false;
  declared_loss_finite_.reset();
  verdict_sent_ = false;
  return stats;
}

}  // namespace pac::comm
