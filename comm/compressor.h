// Compressor: how one gradient bucket is reduced, in the spirit of PyTorch's DDP comm hooks.
// Given a bucket (its flat f32 gradient and the parameters it holds) and the process group, it
// starts the reduction and returns a Work; once that Work is waited on, bucket.flat holds the
// average over ranks (or the compressor's estimate of it), and with it every parameter's gradient,
// since those are views into it. A compressor never writes into parameters. A pruned parameter's
// gradient is compact (BucketEntry::compact): its slot holds only the kept entries, so every
// compressor reduces fewer values on a pruned model. A compressor owns its state (residuals,
// factors) and accounts for the time it spends encoding and decoding.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/option_reader.h"
#include "core/state_dict.h"
#include "layers/parameter.h"

namespace pac::comm {

struct BucketEntry {
  std::string name;
  nn::ParameterPtr param;
  int64_t offset = 0;    // first element of this parameter's gradient in the flat buffer
  int64_t numel = 0;     // values of its gradient: param->grad_numel()
  bool compact = false;  // pruned: the values are its kept entries, in the order of param->kept()
};

struct Bucket {
  int index = 0;
  Tensor flat;  // f32 [n]: the gradients of `entries`, back to back
  std::vector<BucketEntry> entries;
  // Small tensors to all-reduce along with this bucket: the step's finiteness verdict rides on
  // the last one. A compressor that sends the bucket in one coalesced collective takes them into
  // it (all_reduce_with_riders); what it leaves here, the Reducer all-reduces on its own.
  std::vector<ReduceSegment> riders;
};

// All-reduces `segments` and the bucket's riders in one coalesced collective, and takes the
// riders off the bucket.
WorkPtr all_reduce_with_riders(Bucket& bucket, ProcessGroup& group,
                               std::vector<ReduceSegment> segments);

// How one entry of a compressor's state() carries over when a checkpoint written by P ranks
// resumes on another number of ranks (apps/elastic_state.h).
enum class RankStateRule {
  shared,  // the same on every rank (step counters, an agreed scale, PowerSGD's Q): kept as saved
  mean,    // this rank's share of what the ranks add to the average (error-feedback residuals,
           // DGC's velocity): every new rank takes the mean over the saved ranks, so the
           // correction the ranks add to the average together is the one the saved ranks held
  reset,   // no rule keeps what it carries: the compressor's whole state starts afresh
};

class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual std::string name() const = 0;
  virtual WorkPtr reduce(Bucket& bucket, ProcessGroup& group) = 0;
  // Whether reduce() works on buckets in GPU memory (with the NCCL group). The Reducer refuses
  // GPU training with a compressor that says no.
  virtual bool runs_on_gpu() const { return false; }
  // Whether reduce() applies momentum to the gradient itself (DGC's momentum correction): the
  // optimizer's momentum must then move only the weight-decay term, as DGC's own optimizer does,
  // or the gradient would get momentum twice and the weight decay none.
  virtual bool applies_momentum() const { return false; }
  // Bytes one value of this parameter's gradient, as stored (compact while pruned), costs on the
  // wire with `world` ranks, before the collective's own factor: the Reducer cuts its buckets by
  // it. fp32's 4 unless a compressor says otherwise.
  virtual double wire_bytes_per_value(const nn::Parameter& p, int world) const {
    (void)p;
    (void)world;
    return 4.0;
  }
  double codec_seconds() const { return codec_seconds_; }
  // What it decided per bucket, for the log (e.g. pactrain's encodings); empty if nothing.
  virtual std::string describe_buckets() const { return ""; }
  // Passes over gradient data this compressor has run outside the collectives (encode, decode,
  // pack, the average's division): the kernels a GPU build would launch.
  uint64_t kernels() const { return kernels_; }

  // This rank's state, for checkpoints: error-feedback residuals, warm-start factors, step
  // counters, named "bucket<i>.<what>". Ranks differ in it (each has its own residuals), so a
  // checkpoint keeps every rank's. Stateless compressors have none.
  virtual StateDict state() const { return {}; }
  // Restores what state() returned, before the first step of a resumed run. `buckets` are the
  // reducer's, and the parameters' masks are the checkpoint's already.
  virtual void load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                          ProcessGroup& group);
  // How the entry `what` of a bucket's state (state()'s key without its "bucket<i>." prefix:
  // "residual", "steps") carries over to a run on another number of ranks. A compressor that
  // gives no rule has its state reset on such a resume, which is always safe.
  virtual RankStateRule rank_state_rule(const std::string& what) const {
    (void)what;
    return RankStateRule::reset;
  }

  // Called by the Reducer once every bucket of a step is reduced, on every rank alike. `applied`
  // is false when the step is skipped because some rank's gradient (or loss) was not finite: then
  // every change this step's reduce() calls made to the compressor's state (residuals, momentum,
  // factors, step counters, scales) is undone, so that a skipped step leaves no trace. This
  // version undoes what keep_for_undo() recorded; a compressor with state kept otherwise (double
  // buffers) overrides it and calls it too.
  virtual void end_step(bool applied);

  // Called by the Reducer, between steps and on every rank alike, when a bucket's layout changed
  // (a mask changed, so its compact entries hold a different number of values): whatever the
  // compressor keeps per bucket for the old layout (residuals, factors, plans) must go. Counters
  // that do not depend on the layout (steps) may stay.
  virtual void layout_changed(const Bucket& bucket) { (void)bucket; }

 protected:
  // Runs f, one pass over the data, and adds its duration to the codec time.
  void timed(const std::function<void()>& f);
  // Call before reduce() changes `state` (a state tensor) or `counter` in place, once per step
  // and bucket: end_step(false) puts the value recorded here back. The copy is a pass over the
  // state: call it inside the encode's timed() block, so that its time counts as codec time.
  void keep_for_undo(const Tensor& state);
  void keep_for_undo(uint64_t& counter);
  void keep_for_undo(int64_t& counter);
  double codec_seconds_ = 0.0;
  uint64_t kernels_ = 0;

 private:
  struct Undo {
    Tensor state, copy;  // copy: reused from step to step
    bool armed = false;  // recorded this step
  };
  std::map<const void*, Undo> undo_tensors_;  // by the state's data pointer
  std::vector<std::pair<uint64_t*, uint64_t>> undo_unsigned_;
  std::vector<std::pair<int64_t*, int64_t>> undo_signed_;
};

// The key of one bucket's state entry: "bucket3.residual".
std::string bucket_state_key(int bucket, const std::string& what);
// State kept in a map by bucket index, saved as "bucket<i>.<what>" entries, and read back for the
// reducer's buckets (a tensor must have its bucket's shape; entries of buckets that do not exist
// are left for StateReader::finish to refuse).
void save_per_bucket(StateDict& out, const std::string& what, const std::map<int, Tensor>& tensors);
void save_per_bucket(StateDict& out, const std::string& what,
                     const std::map<int, uint64_t>& counters);
void load_per_bucket(StateReader& read, const std::string& what, const std::vector<Bucket>& buckets,
                     std::map<int, Tensor>& tensors);
void load_per_bucket(StateReader& read, const std::string& what, const std::vector<Bucket>& buckets,
                     std::map<int, uint64_t>& counters);

// A Work that runs `then` (on the waiting thread) after `inner` completes: decoding steps.
WorkPtr then(WorkPtr inner, std::function<void()> after);

using CompressorOptions = OptionMap;
using CompressorFactory = std::function<std::unique_ptr<Compressor>(const CompressorOptions&)>;
// Builds a compressor by name: those added with register_compressor(), then the built-in table
// (comm/compressors/registry.cpp); options are the --compress-opt key=value pairs, and an
// unknown key is an error.
std::unique_ptr<Compressor> make_compressor(const std::string& name,
                                            const CompressorOptions& options);
std::vector<std::string> compressor_names();
// Adds (or replaces) a compressor for the rest of the process: how a fork or a test plugs one in
// without touching the library (core/option_reader.h reads its options).
void register_compressor(const std::string& name, CompressorFactory factory);

}  // namespace pac::comm
