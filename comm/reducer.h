// Reducer: DDP's gradient synchronisation. At construction it broadcasts every parameter and
// buffer from rank 0, then groups the parameters, in reverse registration order (the order
// backward produces their gradients), into flat buckets: a small first bucket so communication
// starts early, then larger ones. The sizes are what the buckets send (the compressor says what
// each gradient costs on the wire), so a pruned, coded model's first bucket is small in what it
// sends, not in what it would send dense, and leaves early in backward. From the first step on,
// each parameter's gradient is a view into its bucket: compact for a pruned parameter, so a
// pruned model's buckets hold only kept entries; they are re-laid out, and regrouped, when a
// mask changes. During backward, each parameter's grad-ready hook marks it; when a bucket is
// complete, it and any complete buckets after it are handed to the compressor, strictly in
// bucket order, so the all-reduces run while backward goes on. finalize() waits for all of them.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "comm/compressor.h"
#include "layers/module.h"

namespace pac::comm {

struct ReducerOptions {
  double bucket_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool allow_unused = false;  // parameters without a gradient are reduced as zeros
};

struct ReducerStepStats {
  uint64_t bytes_sent = 0;      // this rank, this step: the buckets and the verdict
  uint64_t verdict_bytes = 0;   // of which the step's finiteness verdict (riding or alone)
  double codec_s = 0.0;         // encode + decode time this step
  double comm_exposed_s = 0.0;  // time finalize() waited: communication not hidden by backward
  uint64_t codec_kernels = 0;   // the compressor's passes over gradient data this step
  // Exchanges (ProcessGroup::exchanges) this step, and those still to run when finalize()
  // began, that is after backward: the round trips backward did not hide.
  uint64_t exchanges = 0;
  uint64_t exchanges_after_backward = 0;
  // Whether the step must not be applied, the same on every rank: some rank's gradient or loss
  // was not finite before the reduction, or the averaged gradient is not (an overflow).
  bool nonfinite = false;
  int nonfinite_rank = -1;   // the highest rank whose own gradient or loss was not finite; -1: none
  std::string nonfinite_in;  // this rank's first parameter with a non-finite gradient (sent or
                             // averaged), "loss", or "" where this rank found none
};

// What a parameter's gradient costs on the wire, in bytes: how buckets are cut.
using WireBytes = std::function<double(const nn::Parameter&)>;

// The Reducer's bucket layout for these parameters (in registration order): reverse order, the
// first bucket small, each closed once its parameters cost the bucket's size on the wire
// (`wire_bytes`; by default their dense fp32 size, which masks do not change). Each bucket's flat
// buffer is allocated unless `allocate` is false; no gradient is attached. Also used to predict
// bytes per step without a run (pactrain prune-report).
std::vector<Bucket> make_buckets(const std::vector<std::pair<std::string, nn::ParameterPtr>>& named,
                                 const ReducerOptions& options, bool allocate = true,
                                 const WireBytes& wire_bytes = {});

class Reducer {
 public:
  Reducer(nn::Module& model, ProcessGroupPtr group, std::unique_ptr<Compressor> compressor,
          const ReducerOptions& options = {});
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Waits until every bucket is reduced (the averaged gradients are in the parameters' .grad)
  // and readies the reducer for the next backward. Call it after loss.backward(), with whether
  // this rank's loss was finite. Before the compressor sees a bucket, its gradients are checked
  // for NaN and Inf (a quantised wire could not carry them), and that verdict is made every
  // rank's by an all-reduce-max (see declare_loss_finite); a step found non-finite leaves the
  // compressor's state as it was (Compressor::end_step), and the caller must skip its update
  // (stats.nonfinite).
  ReducerStepStats finalize(bool loss_is_finite = true);

  // Says, before backward, whether this rank's loss is finite: the step's verdict can then
  // travel with the last bucket (Bucket::riders) instead of in an all-reduce of its own after it.
  // finalize() must then be given the same answer. Host buckets only: on a GPU the verdict is
  // read from the device after the buckets, in its own all-reduce.
  void declare_loss_finite(bool finite) { declared_loss_finite_ = finite; }

  // While paused, backward passes are not reduced (the gradients stay local): for a pruning
  // criterion's gradient pass on one rank only. Call finalize() only while not paused.
  void set_paused(bool paused) { paused_ = paused; }
  bool paused() const { return paused_; }

  // Reduces what `fill` writes into the parameters' gradients, as if one backward pass had
  // produced them all, and waits (finalize()): for averaging something other than a step's
  // gradients through the same buckets and compressor, such as local SGD's and DiLoCo's
  // pseudo-gradient. The buckets follow the masks before `fill` runs. Not while paused.
  ReducerStepStats reduce_now(const std::function<void()>& fill);

  // Restores the compressor's checkpointed state (Compressor::load_state) for the buckets as the
  // parameters' current masks lay them out: call it after the checkpoint's masks are installed.
  void load_compressor_state(const StateDict& state);

  // Re-lays out the buckets whose parameters' masks changed since they were laid out (every step
  // does at its first gradient; a resume does before it compares groupings).
  void follow_masks();
  // How many parameters each bucket holds, in bucket order, as laid out now (i64 [buckets]): the
  // grouping a compressor's per-bucket state belongs to.
  Tensor grouping() const;
  // Lays the buckets out as `grouping` (from grouping()) says and keeps that layout until a mask
  // changes: a run resumed on another number of ranks, whose wire bytes may cut the buckets
  // otherwise, keeps the saved run's and with them the compressor's per-bucket state. Before the
  // first step only. False, and nothing changed, when the counts do not cover the parameters.
  bool adopt_grouping(const Tensor& grouping);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  ProcessGroup& group() { return *group_; }
  Compressor& compressor() { return *compressor_; }

 private:
  void start_step();
  void mark_ready(size_t parameter);  // by registration order
  // What each gradient costs on the wire, as the compressor says.
  WireBytes wire_bytes() const;
  // Makes `buckets` the layout: no buffer yet, every parameter to be attached by follow_masks().
  void lay_out(std::vector<Bucket> buckets);
  void launch_ready_buckets();
  void check_finite(const Bucket& bucket);
  // Puts this rank's verdict on the last bucket as a rider, when the loss was declared.
  void attach_verdict(Bucket& bucket);

  ProcessGroupPtr group_;
  std::unique_ptr<Compressor> compressor_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> pending_;          // per bucket: parameters whose gradient is not yet ready
  std::vector<std::vector<bool>> ready_;  // per bucket and parameter, this step
  std::vector<WorkPtr> work_;             // per bucket, once launched
  size_t next_launch_ = 0;
  bool paused_ = false;
  bool step_started_ = false;               // a gradient of this step has arrived
  std::vector<uint64_t> mask_versions_;     // per parameter, in bucket order: the layout's masks
  std::vector<uint64_t> adopted_versions_;  // adopt_grouping(): the masks it was adopted for
  std::vector<std::pair<size_t, size_t>> where_;  // per parameter, by registration: bucket, entry
  std::shared_ptr<Reducer*> alive_;  // what the parameters' hooks reach this Reducer through
  uint64_t bytes_at_step_start_ = 0;
  uint64_t verdict_bytes_at_step_start_ = 0;
  double codec_at_step_start_ = 0.0;
  uint64_t kernels_at_step_start_ = 0;
  std::vector<std::pair<std::string, nn::ParameterPtr>> named_;
  std::string nonfinite_in_;  // this step: the first parameter found non-finite before sending
  Tensor gpu_nonfinite_;      // GPU buckets: f32 [parameters], non-finite values found in each
  std::vector<int64_t> first_slot_;           // per bucket: the slot of its first parameter
  std::optional<bool> declared_loss_finite_;  // this step's, if declared before backward
  Tensor verdict_;             // f32 [1]: rank + 1 where this rank found a non-finite value, else 0
  bool verdict_sent_ = false;  // this step's verdict is on its way (with the last bucket)
  WorkPtr verdict_work_;       // its own all-reduce, where the compressor did not take it
  uint64_t exchanges_at_step_start_ = 0;
};

}  // namespace pac::comm
