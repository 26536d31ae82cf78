// pactrain: the compressor of the PacTrain paper. Every rank holds the same pruning masks, so a
// pruned weight's gradient is sparse on the same positions everywhere, and the Parameter already
// stores it compact: only its kept entries, gathered as backward accumulated it. A bucket of them
// is a short dense vector, all-reduced as is, with no index exchange, so any ring or NCCL
// all-reduce carries it. Per bucket:
//   fp32       the bucket is the send buffer: one all-reduce (average) in place, exactly as dense
//              does, so pactrain makes no more passes over gradient memory than dense;
//   bf16/fp16  one pass encodes into the wire buffer, one decodes the sums back into the bucket;
//   ternary    TernGrad coding of the weights' kept values, layer-wise as in the TernGrad paper:
//              per weight a scale s shared by all ranks, t = sign(v) with probability
//              min(1, |v|/s), the sums of t packed several to a 64-bit word (ternary_codec.h);
//              error feedback (ef, on by default) and TernGrad's clipping (clip, 2.5 by
//              default) bring its accuracy close to fp32's (docs/results.md). 1-D parameters
//              (biases, norm scales and shifts) travel in fp32 beside them: a ternary step of
//              +-s or 0 on every normalisation shift left the network trained in training mode
//              but broken in evaluation mode. Passes: prepare, encode, decode.
//   auto       measures the link and each encoding's codec when a bucket's plan is built, and
//              picks the cheapest of fp32, bf16 and ternary (pactrain_auto.h has the rule).
// A plan (the encoding, the ternary positions) is rebuilt only when a mask changes. The encoding
// codes every bucket that holds weights, pruned or not, so the steps before the first pruning
// event are coded too (before, they went dense in fp32: at 10 Mbit/s ResNet-20's first epoch then
// cost as much link time as the eight that followed). With enc=fp32 a bucket with nothing pruned
// in its weights goes dense, and with no masks at all `pactrain` is exactly `dense`.
//
// On the GPU (buckets in device memory, NCCL) the same steps run as kernels (pactrain_kernels.cu)
// on the compute stream, and the wire format is the same; the ternary coin flips come from a
// counter-based hash instead of the CPU's sequential generator. Codec times there are launch
// times: the kernels themselves overlap with everything else queued.
//
// Ternary's scale (--compress-opt scale=fresh|previous, clip=C):
//   fresh     s = max |v| over the weight's kept entries on any rank, this step: one
//             all-reduce-max of one float per weight, which backward waits for. |v| <= s
//             always, so the coding is unbiased.
//   previous  s = that maximum from the previous step, all-reduced after the step's values and
//             never waited for; a value above it is sent as sign(v) * s and the rest stays in the
//             error feedback, so it needs ef=1 (and is its default). The first step of a plan
//             uses a fresh scale.
//   levels=L  codes each kept value as one of -L..L times s / L instead of -1, 0, 1 times s
//             (QSGD's stochastic levels; ternary_codec.h): a variance about L times smaller, for
//             fields of the width of 2LP instead of 2P on the wire (with 2 ranks and L = 3,
//             4.27 bits a value against 3.05). The default is L = 3: on ResNet-20 at 80% it
//             closed the gap to fp32 that L = 1 left (docs/results.md); levels=1 is TernGrad's
//             ternary.
//   clip=C    as the TernGrad paper: each rank's maximum is first cut to C times the root mean
//             square of the weight's values (C = 2.5 there), so that one large value does not set
//             a scale that codes every other value to zero with a high variance; values above the
//             scale are sent as sign(v) * s (with ef=1 the rest is carried to the next step).
//   enc1d=bf16  the 1-D parameters' values beside the codes in bf16 instead of fp32: on 8 ranks
//             they are about a fifth of a ResNet-20 step's bytes once the codes travel coded.
#include "comm/compressors/pactrain.h"

#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "comm/compressors/builtin.h"
#include "comm/compressors/pactrain_auto.h"
#include "comm/compressors/pactrain_kernels.h"
#include "comm/compressors/pactrain_ternary.h"
#include "core/cuda/kernels.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/option_reader.h"

namespace pac::comm {

const char* encoding_name(Encoding e) {
  switch (e) {
    case Encoding::fp32:
      return "fp32";
    case Encoding::bf16:
      return "bf16";
    case Encoding::fp16:
      return "fp16";
    case Encoding::ternary:
      return "ternary";
    case Encoding::automatic:
      return "auto";
  }
  return "?";
}

namespace {
bool is_weight(const BucketEntry& e) { return e.param->shape().size() >= 2; }
}  // namespace

double pactrain_wire_bytes_per_value(const nn::Parameter& p, const std::string& enc, int world,
                                     int levels, bool int16, DType plain) {
  if (enc == "bf16" || enc == "fp16") return 2.0;
  if (enc == "fp32") return 4.0;
  if (p.shape().size() < 2) return static_cast<double>(dtype_size(plain));
  const TernaryWire wire = ternary_wire(world, levels, int16);
  return static_cast<double>(dtype_size(wire.dtype)) / wire.per_word;
}

PactrainLayout pactrain_layout(const Bucket& bucket) {
  PactrainLayout layout;
  for (const auto& e : bucket.entries) {
    const nn::Parameter& p = *e.param;
    if (is_weight(e) && p.kept_count() < p.numel()) layout.compact = true;
  }
  for (const auto& e : bucket.entries) {
    const int64_t values = layout.compact ? e.param->kept_count() : e.param->numel();
    layout.values += values;
    if (is_weight(e)) {
      layout.coded += values;
      ++layout.coded_parameters;
    } else {
      layout.plain += values;
    }
  }
  return layout;
}

namespace {

class Pactrain : public Compressor {
 public:
  Pactrain(Encoding encoding, bool error_feedback, bool previous_scale, float clip, int levels,
           uint64_t seed, DType plain)
      : encoding_(encoding),
        error_feedback_(error_feedback),
        previous_scale_(previous_scale),
        clip_(clip),
        levels_(levels),
        seed_(seed),
        plain_(plain) {}
  std::string name() const override { return "pactrain"; }
  bool runs_on_gpu() const override { return true; }

  double wire_bytes_per_value(const nn::Parameter& p, int world) const override {
    return pactrain_wire_bytes_per_value(p, encoding_name(encoding_), world, levels_,
                                         /*int16=*/p.data().device().is_cpu(), plain_);
  }

  // The bucket's plan goes; the next reduce() builds one for what the bucket now holds.
  void layout_changed(const Bucket& bucket) override { plans_.erase(bucket.index); }

  // Step counts, encodings and the agreed scales are every rank's; the residuals are each rank's
  // own share of the correction.
  RankStateRule rank_state_rule(const std::string& what) const override {
    return what == "residual" ? RankStateRule::mean : RankStateRule::shared;
  }

  std::string describe_buckets() const override {
    std::vector<std::string> parts;
    for (const auto& [index, plan] : plans_) {
      parts.push_back(plan.dense
                          ? fmt::format("bucket {}: dense", index)
                          : fmt::format("bucket {}: {} {}values as {}{}", index, plan.count,
                                        plan.compact ? "kept " : "", encoding_name(plan.encoding),
                                        plan.encoding == Encoding::ternary && levels_ > 1
                                            ? fmt::format(" (levels={})", levels_)
                                            : ""));
    }
    return fmt::format("{}", fmt::join(parts, "; "));
  }

  // One collective per bucket: the codes, the 1-D parameters' fp32 values and the next step's
  // scales travel in one coalesced all-reduce (with the step's verdict on the last bucket), so a
  // bucket pays its round trips once.
  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    PactrainPlan& plan = plans_[bucket.index];
    if (!plan_is_current(plan, bucket)) build_plan(plan, bucket, group);
    if (plan.dense || plan.encoding == Encoding::fp32) {
      ++kernels_;  // the average's division, as in dense: the bucket is the send buffer
      return all_reduce_with_riders(bucket, group, {{bucket.flat, ReduceOp::avg}});
    }
    keep_for_undo(plan.steps);
    ++plan.steps;
    if (plan.encoding != Encoding::ternary) {
      encode_half(plan, bucket, group.size());
      return then(all_reduce_with_riders(bucket, group, {{plan.wire, ReduceOp::sum}}),
                  [this, &plan, &bucket] { decode_half(plan, bucket); });
    }
    plan.coded_this_step = true;
    prepare_ternary(plan, bucket, group);
    encode_ternary(plan, group);
    std::vector<ReduceSegment> segments{
        {plan.wire, ReduceOp::sum, nullptr, packed_sum(plan.layout, plan.coded.numel())}};
    if (plan.plain.numel() > 0) segments.push_back({plan.plain_values, ReduceOp::sum});
    if (previous_scale_) segments.push_back({plan.next_scale, ReduceOp::max});
    return then(all_reduce_with_riders(bucket, group, std::move(segments)),
                [this, &plan, &bucket, &group] { decode_ternary(plan, bucket, group.size()); });
  }

  // The step's residuals and next scales become current only if the step is applied; a skipped
  // step leaves the plans as they were (the counters through keep_for_undo).
  void end_step(bool applied) override {
    for (auto& [index, plan] : plans_) {
      if (!plan.coded_this_step) continue;
      plan.coded_this_step = false;
      if (!applied) continue;
      if (error_feedback_) std::swap(plan.residual, plan.next_residual);
      if (previous_scale_) {
        std::swap(plan.scale, plan.next_scale);
        plan.scale_known = true;
      }
    }
    Compressor::end_step(applied);
  }

  // Per coded bucket: its step count (the ternary coin flips' seed), its encoding and the
  // ternary error feedback. The rest of a plan follows from the masks.
  StateDict state() const override {
    StateDict out;
    for (const auto& [index, plan] : plans_) {
      if (plan.dense) continue;
      out[bucket_state_key(index, "steps")] = counter_tensor(static_cast<int64_t>(plan.steps));
      out[bucket_state_key(index, "encoding")] =
          counter_tensor(static_cast<int64_t>(plan.encoding));
      if (plan.residual.defined() && error_feedback_)
        out[bucket_state_key(index, "residual")] = plan.residual;
      if (plan.scale_known) out[bucket_state_key(index, "scale")] = plan.scale;
    }
    return out;
  }

  // Builds the saved buckets' plans now, from the checkpoint's masks: if the pruner changes a mask
  // before the first step, the plan is rebuilt afresh, as it was in the run that was saved.
  // Checkpoints from before the 1-D parameters travelled in fp32 hold a residual over every value
  // of the bucket and a scale per parameter: the weights' parts are taken from them.
  void load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                  ProcessGroup& group) override {
    StateReader read("compressor pactrain", state);
    for (const auto& bucket : buckets) {
      if (!read.has(bucket_state_key(bucket.index, "steps"))) continue;
      int64_t encoding = read.counter(bucket_state_key(bucket.index, "encoding"));
      PAC_CHECK(encoding >= 0 && encoding < static_cast<int64_t>(Encoding::automatic),
                "compressor pactrain: saved encoding {} of bucket {} is not one of fp32, bf16, "
                "fp16, ternary",
                encoding, bucket.index);
      PactrainPlan& plan = plans_[bucket.index];
      build_plan(plan, bucket, group, static_cast<Encoding>(encoding));
      PAC_CHECK(!plan.dense,
                "compressor pactrain: the checkpoint has a plan for bucket {} with encoding {}, "
                "but its parameters have no pruned weights and nothing to code",
                bucket.index, encoding_name(plan.encoding));
      plan.steps = static_cast<uint64_t>(read.counter(bucket_state_key(bucket.index, "steps")));
      const std::string residual_key = bucket_state_key(bucket.index, "residual");
      if (read.has(residual_key)) {
        PAC_CHECK(plan.residual.defined(),
                  "compressor pactrain: the checkpoint has a ternary residual for bucket {}, but "
                  "it was saved with encoding {}",
                  bucket.index, encoding_name(plan.encoding));
        if (read.has_shape(residual_key, plan.residual.shape())) {
          read.copy_into(residual_key, plan.residual);
        } else {
          Tensor every = read.tensor(residual_key, bucket.flat.shape()).to(bucket.flat.device());
          index_gather_(plan.residual, every, plan.coded);
        }
      }
      const std::string scale_key = bucket_state_key(bucket.index, "scale");
      if (read.has(scale_key)) {
        if (read.has_shape(scale_key, plan.scale.shape())) {
          read.copy_into(scale_key, plan.scale);
        } else {
          Tensor every =
              read.tensor(scale_key, {static_cast<int64_t>(bucket.entries.size())}).cpu();
          std::vector<float> weights;
          for (size_t e = 0; e < bucket.entries.size(); ++e)
            if (is_weight(bucket.entries[e])) weights.push_back(every.data<float>()[e]);
          plan.scale.copy_(Tensor::from_vector(weights, plan.scale.shape()));
        }
        plan.scale_known = true;
      }
    }
    read.finish();
  }

 private:
  static bool plan_is_current(const PactrainPlan& plan, const Bucket& bucket) {
    if (plan.mask_versions.size() != bucket.entries.size()) return false;
    for (size_t e = 0; e < bucket.entries.size(); ++e) {
      if (plan.mask_versions[e] != bucket.entries[e].param->mask_version()) return false;
    }
    return true;
  }

  // `restored`: the encoding a checkpoint recorded, instead of choosing one (enc=auto measures,
  // and a measurement would not repeat).
  void build_plan(PactrainPlan& plan, const Bucket& bucket, ProcessGroup& group,
                  std::optional<Encoding> restored = std::nullopt) {
    plan = PactrainPlan();
    plan.bucket = bucket.index;
    for (const auto& e : bucket.entries) plan.mask_versions.push_back(e.param->mask_version());
    const PactrainLayout layout = pactrain_layout(bucket);
    plan.compact = layout.compact;
    plan.count = bucket.flat.numel();
    const Encoding wanted = restored ? *restored : encoding_;
    plan.dense = !plan.compact && (wanted == Encoding::fp32 || layout.coded_parameters == 0);
    if (plan.dense) return;
    plan.encoding = restored                           ? *restored
                    : encoding_ == Encoding::automatic ? choose(plan, bucket, group)
                                                       : encoding_;
    allocate(plan, bucket, group.size());
  }

  // The wire buffer, and for ternary the positions, scales and residuals.
  void allocate(PactrainPlan& plan, const Bucket& bucket, int world) {
    const int64_t k = bucket.flat.numel();
    const Device device = bucket.flat.device();
    plan.wire = Tensor();
    plan.coded = plan.plain = plan.values = plan.plain_values = Tensor();
    plan.residual = plan.next_residual = Tensor();
    plan.entry_begin.clear();
    switch (plan.encoding) {
      case Encoding::fp32:
      case Encoding::automatic:
        return;
      case Encoding::bf16:
        plan.wire = Tensor::zeros({k}, DType::bf16, device);
        return;
      case Encoding::fp16:
        plan.wire = Tensor::zeros({k}, DType::f16, device);
        return;
      case Encoding::ternary:
        break;
    }
    allocate_ternary(plan, bucket, world, ternary());
  }

  TernarySettings ternary() const {
    return {error_feedback_, previous_scale_, clip_, levels_, seed_, plain_};
  }

  // bf16/fp16: the bucket divided by the world size, converted into the wire.
  void encode_half(PactrainPlan& plan, const Bucket& bucket, int world) {
    const float* g = bucket.flat.data<float>();
    const int64_t k = bucket.flat.numel();
    const float inv_world = 1.0f / static_cast<float>(world);
    timed([&] {
      if (bucket.flat.is_cuda())
        return gpu::gather_scaled(g, nullptr, k, inv_world, plan.wire.raw_data(),
                                  plan.wire.dtype());
      if (plan.encoding == Encoding::bf16) {
        BFloat16* w = plan.wire.data<BFloat16>();
        for (int64_t j = 0; j < k; ++j) w[j] = float_to_bf16(g[j] * inv_world);
      } else {
        Half* w = plan.wire.data<Half>();
        for (int64_t j = 0; j < k; ++j) w[j] = float_to_half(g[j] * inv_world);
      }
    });
  }

  // The reduced sums back into the bucket: the averaged gradient.
  void decode_half(PactrainPlan& plan, Bucket& bucket) {
    timed([&] {
      Tensor& w = plan.wire;
      float* v = bucket.flat.data<float>();
      const int64_t k = bucket.flat.numel();
      if (bucket.flat.is_cuda()) return cuda::convert(w.raw_data(), w.dtype(), v, DType::f32, k);
      if (plan.encoding == Encoding::bf16) {
        const BFloat16* in = w.data<BFloat16>();
        for (int64_t j = 0; j < k; ++j) v[j] = bf16_to_float(in[j]);
      } else {
        const Half* in = w.data<Half>();
        for (int64_t j = 0; j < k; ++j) v[j] = half_to_float(in[j]);
      }
    });
  }

  // Ternary's passes (pactrain_ternary.h), timed as the codec's. A fresh scale must be known on
  // every rank before coding, so its all-reduce-max is waited for after the first pass;
  // scale=previous does without the wait. Queuing the coding on the communication thread
  // instead, so that backward never waits, was measured slower on CPU ranks that share their
  // cores with MPI's spinning progress loop (ResNet-18, 2 ranks on 2 cores, 1 Gbit/s:
  // 77 samples/s against 99 with the wait).
  void prepare_ternary(PactrainPlan& plan, const Bucket& bucket, ProcessGroup& group) {
    timed([&] { comm::prepare_ternary(plan, bucket, group.size(), ternary()); });
    if (!previous_scale_ || !plan.scale_known) {
      if (previous_scale_) plan.scale.copy_(plan.next_scale);
      // On the GPU this orders the coding after the maxima's all-reduce; the host goes on.
      group.all_reduce(plan.scale, ReduceOp::max)->wait();
    }
  }
  void encode_ternary(PactrainPlan& plan, ProcessGroup& group) {
    timed([&] { comm::encode_ternary(plan, group.rank(), ternary()); });
  }
  void decode_ternary(PactrainPlan& plan, Bucket& bucket, int world) {
    timed([&] { comm::decode_ternary(plan, bucket, world); });
  }

  // enc=auto (pactrain_auto.h). The codecs run on a copy of the bucket: the gradient in it is
  // this step's.
  Encoding choose(PactrainPlan& plan, const Bucket& bucket, ProcessGroup& group) {
    const Device device = bucket.flat.device();
    const bool saved_ef = error_feedback_;
    error_feedback_ = false;  // calibration must not leave a residual behind
    Bucket scratch = bucket;
    scratch.flat = bucket.flat.clone();
    auto codec_seconds = [&](AutoCandidate candidate) {
      const Encoding encodings[] = {Encoding::fp32, Encoding::bf16, Encoding::ternary};
      plan.encoding = encodings[static_cast<int>(candidate)];
      allocate(plan, scratch, group.size());  // outside the time taken, as at a plan's build
      if (!device.is_cpu()) cuda_synchronize();
      const double codec_before = codec_seconds_;
      const uint64_t kernels_before = kernels_;
      const auto start = std::chrono::steady_clock::now();
      switch (candidate) {
        case AutoCandidate::fp32:
          scale_(scratch.flat, 1.0f / static_cast<float>(group.size()));  // the average
          break;
        case AutoCandidate::bf16:
          encode_half(plan, scratch, group.size());
          decode_half(plan, scratch);
          break;
        case AutoCandidate::ternary:
          prepare_ternary(plan, scratch, group);
          encode_ternary(plan, group);
          decode_ternary(plan, scratch, group.size());
          break;
      }
      if (!device.is_cpu()) cuda_synchronize();
      // The ternary prepare waits for its scale all-reduce; only the coding counts there.
      const double seconds =
          candidate == AutoCandidate::ternary
              ? codec_seconds_ - codec_before
              : std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      codec_seconds_ = codec_before;
      kernels_ = kernels_before;
      scratch.flat.copy_(bucket.flat);
      return seconds;
    };
    const EncodingCosts costs =
        measure_encoding_costs(bucket.flat.numel(), device, group, codec_seconds);
    error_feedback_ = saved_ef;
    const PactrainLayout layout = pactrain_layout(bucket);
    const double ternary_bytes =
        double(ternary_wire(group.size(), levels_, device.is_cpu()).bytes(layout.coded) +
               static_cast<int64_t>(dtype_size(plain_)) * layout.plain) /
        double(bucket.flat.numel());
    switch (cheapest_encoding(costs, ternary_bytes, !previous_scale_)) {
      case AutoCandidate::bf16:
        return Encoding::bf16;
      case AutoCandidate::ternary:
        return Encoding::ternary;
      default:
        return Encoding::fp32;
    }
  }

  Encoding encoding_;
  bool error_feedback_;
  bool previous_scale_;
  float clip_;  // > 0: a weight's scale is at most clip x the root mean square of its values
  int levels_;  // ternary's codes are -levels..levels (1: TernGrad's -1, 0, 1)
  uint64_t seed_;
  DType plain_;  // how the 1-D parameters' values travel beside ternary codes: f32 or bf16
  std::map<int, PactrainPlan>
      plans_;  // by bucket index; a map, so pending work's references stay valid
};

}  // namespace

int pactrain_levels(const CompressorOptions& options) {
  const auto enc = options.find("enc");
  const bool ternary = enc != options.end() && (enc->second == "ternary" || enc->second == "auto");
  const auto given = options.find("levels");
  if (given == options.end()) return ternary ? kDefaultTernaryLevels : 1;
  const std::optional<double> levels = parse_number(given->second);
  PAC_CHECK(levels && *levels >= 1 && *levels <= 127 && *levels == std::floor(*levels),
            "--compress-opt levels={} for pactrain: expected a whole number of levels from 1 "
            "(ternary: -1, 0, 1) to 127",
            given->second);
  PAC_CHECK(*levels == 1 || ternary,
            "--compress-opt levels={} for pactrain: levels apply to enc=ternary (or auto), not "
            "enc={}",
            given->second, enc == options.end() ? "fp32" : enc->second);
  return static_cast<int>(*levels);
}

std::unique_ptr<Compressor> make_pactrain(const CompressorOptions& options) {
  OptionReader read("--compress-opt", "pactrain", options);
  std::string enc = read.choice("enc", {"fp32", "bf16", "fp16", "ternary", "auto"});
  // Ternary's defaults are the configuration that trains as well as fp32 (docs/pruning.md):
  // error feedback, the previous step's scales, TernGrad's clipping at 2.5, and codes in -3..3.
  const bool ternary = enc == "ternary" || enc == "auto";
  bool ef = read.flag("ef", ternary);
  std::string scale = read.choice("scale", {"fresh", "previous"});
  if (ef && !options.count("scale")) scale = "previous";  // the default with error feedback
  auto clip = static_cast<float>(read.number("clip", ternary ? 2.5 : 0.0));
  read.number("levels", 1);  // read by pactrain_levels
  auto seed = static_cast<uint64_t>(read.integer("seed", 0));
  const std::string enc1d = read.choice("enc1d", {"fp32", "bf16"});
  read.finish();
  Encoding encoding = Encoding::fp32;
  for (Encoding e :
       {Encoding::fp32, Encoding::bf16, Encoding::fp16, Encoding::ternary, Encoding::automatic}) {
    if (enc == encoding_name(e)) encoding = e;
  }
  PAC_CHECK(!ef || encoding == Encoding::ternary || encoding == Encoding::automatic,
            "--compress-opt ef=1 for pactrain: error feedback applies to enc=ternary (or auto), "
            "not enc={}",
            enc);
  PAC_CHECK(scale == "fresh" || ef,
            "--compress-opt scale=previous for pactrain: values above the previous step's scale "
            "are clipped, and only error feedback (ef=1) sends the clipped part later; add ef=1 "
            "or use scale=fresh");
  PAC_CHECK(clip == 0.0f || clip >= 1.0f,
            "--compress-opt clip={} for pactrain: the scale is clipped to clip x the root mean "
            "square of a weight's values; use 0 (off) or a value >= 1 (TernGrad uses 2.5)",
            clip);
  PAC_CHECK(enc1d == "fp32" || ternary,
            "--compress-opt enc1d={} for pactrain: the 1-D parameters travel apart only beside "
            "ternary codes (enc=ternary or auto); with enc={} they go as the rest",
            enc1d, enc);
  return std::make_unique<Pactrain>(encoding, ef, scale == "previous", clip,
                                    pactrain_levels(options), seed,
                                    enc1d == "bf16" ? DType::bf16 : DType::f32);
}

}  // namespace pac::comm
