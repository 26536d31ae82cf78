// pactrain: the compressor of the PacTrain paper. Every rank holds the same pruning masks, so the
// gradient of a pruned bucket is sparse on the same positions everywhere: the kept entries are
// gathered into a short dense vector and all-reduced as is, with no index exchange, so any ring
// or NCCL all-reduce carries it. Per bucket:
//   pack    one pass gathers the kept entries (already divided by the world size) straight into
//           the send buffer, in the wire encoding;
//   reduce  one all-reduce (sum) of that vector;
//   unpack  none for fp32: the reduced vector *is* the averaged compact gradient, and each
//           Parameter's compact_grad is a view into it, which the optimizer reads while it updates
//           the kept positions. Other encodings decode into that vector in one pass.
// The bucket-relative kept positions are rebuilt only when a mask changes. A bucket with nothing
// pruned in its weights, or holding only 1-D parameters, goes dense; with no masks at all this is
// exactly the `dense` compressor.
//
// Encodings (--compress-opt enc=...): fp32, bf16, fp16, ternary (TernGrad coding of the kept
// values, layer-wise as in the TernGrad paper: per parameter a scale s shared by all ranks,
// t = sign(v) with probability min(1, |v|/s), the sums of t packed several to a 64-bit word (see
// TernaryWire); ef=1 adds error feedback), and auto, which measures, per bucket when its plan is
// built, one all-reduce of the compact fp32 vector (t_v), one of a single value (t_1, the latency)
// and each encoding's pack+unpack time (c_e), averages them over the ranks so all choose alike,
// and picks the smallest
//   cost(e) = t_1 + (t_v - t_1) * bytes(e) / 4 + c_e  (+ t_1 when ternary waits for its scales).
//
// On the GPU (buckets in device memory, NCCL) the same steps run as kernels (core/cuda/pactrain.cu)
// on the compute stream, and the wire format is the same; the ternary coin flips come from a
// counter-based hash instead of the CPU's sequential generator. Codec times there are launch
// times: the kernels themselves overlap with everything else queued.
//
// Ternary's scale (--compress-opt scale=fresh|previous):
//   fresh     s = max |v| over the parameter's kept entries on any rank, this step: one
//             all-reduce-max of one float per parameter, which backward waits for. |v| <= s
//             always, so the coding is unbiased.
//   previous  s = that maximum from the previous step, all-reduced after the step's values and
//             never waited for; a value above it is sent as sign(v) * s and the rest stays in the
//             error feedback, so it needs ef=1 (and is its default). The first step of a plan
//             uses a fresh scale.
#include "comm/compressors/pactrain.h"

#include <bit>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "comm/compressors/builtin.h"
#include "comm/compressors/options.h"
#include "core/cuda/kernels.h"
#include "core/generator.h"

namespace pac::comm {

PactrainLayout pactrain_layout(const Bucket& bucket) {
  PactrainLayout layout;
  for (const auto& e : bucket.entries) {
    const nn::Parameter& p = *e.param;
    if (p.shape().size() >= 2 && p.kept_count() < p.numel()) layout.compact = true;
  }
  for (const auto& e : bucket.entries)
    layout.values += layout.compact ? e.param->kept_count() : e.numel;
  return layout;
}

TernaryWire ternary_wire(int world) {
  PAC_CHECK(world >= 1 && world <= 32767, "pactrain ternary: world size {} is outside 1..32767",
            world);
  TernaryWire packed;
  packed.bits = std::bit_width(static_cast<unsigned>(2 * world));
  packed.per_word = 63 / packed.bits;
  packed.dtype = DType::i64;
  TernaryWire one_each;
  one_each.dtype = world <= 127 ? DType::i8 : DType::i16;
  return packed.bytes(1 << 20) < one_each.bytes(1 << 20) ? packed : one_each;
}

namespace {

// Writes ternary codes t in {-1, 0, 1} into a TernaryWire buffer, one after the other.
class TernaryWriter {
 public:
  TernaryWriter(Tensor& wire, const TernaryWire& layout)
      : data_(wire.raw_data()), layout_(layout) {}

  void put(int t) {
    if (layout_.bits == 0) {
      if (layout_.dtype == DType::i8)
        static_cast<int8_t*>(data_)[at_++] = static_cast<int8_t>(t);
      else
        static_cast<int16_t*>(data_)[at_++] = static_cast<int16_t>(t);
      return;
    }
    word_ |= static_cast<uint64_t>(t + 1) << (field_ * layout_.bits);
    if (++field_ == layout_.per_word) flush();
  }

  // Stores a partly filled last word.
  void flush() {
    if (layout_.bits == 0 || field_ == 0) return;
    static_cast<int64_t*>(data_)[at_++] = static_cast<int64_t>(word_);
    word_ = 0;
    field_ = 0;
  }

 private:
  void* data_;
  TernaryWire layout_;
  int64_t at_ = 0;
  uint64_t word_ = 0;
  int field_ = 0;
};

// Reads the reduced sums back, in the order they were written: each the sum of t over the ranks.
class TernaryReader {
 public:
  TernaryReader(const Tensor& wire, const TernaryWire& layout, int world)
      : data_(wire.raw_data()), layout_(layout), world_(world) {}

  int next() {
    if (layout_.bits == 0) {
      return layout_.dtype == DType::i8 ? static_cast<const int8_t*>(data_)[at_++]
                                        : static_cast<const int16_t*>(data_)[at_++];
    }
    if (field_ == 0) word_ = static_cast<uint64_t>(static_cast<const int64_t*>(data_)[at_++]);
    int sum = static_cast<int>(word_ & ((uint64_t(1) << layout_.bits) - 1)) - world_;
    word_ >>= layout_.bits;
    if (++field_ == layout_.per_word) field_ = 0;
    return sum;
  }

 private:
  const void* data_;
  TernaryWire layout_;
  int world_;
  int64_t at_ = 0;
  uint64_t word_ = 0;
  int field_ = 0;
};

enum class Encoding { fp32, bf16, fp16, ternary, automatic };

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

// Everything a compact bucket needs, built once per mask change.
struct Plan {
  int bucket = 0;
  std::vector<uint64_t> mask_versions;  // of the bucket's parameters when the plan was built
  bool compact = false;
  Tensor positions;                 // i32 [K]: bucket-relative positions of the kept entries
  Tensor values;                    // f32 [K]: the packed vector, then the averaged gradient
  std::vector<Tensor> entry_grads;  // per entry: its slice of `values`
  Encoding encoding = Encoding::fp32;
  Tensor wire;      // in the wire encoding: bf16 or f16 [K], ternary's TernaryWire; unused for fp32
  Tensor residual;  // f32 [K]: ternary error feedback, as the step starts
  Tensor next_residual;  // f32 [K]: what this step leaves; end_step swaps them if it is applied
  std::vector<int64_t> entry_begin;  // per entry and one past the end: its range in `values`
  Tensor begin;                      // entry_begin as i64, on the bucket's device (GPU kernels)
  Tensor scale;              // f32 [entries]: ternary's per-parameter scales, shared by all ranks
  Tensor next_scale;         // f32 [entries]: scale=previous, this step's maxima for the next
  bool scale_known = false;  // scale=previous: `scale` holds the previous step's maxima
  uint64_t steps = 0;
  bool coded = false;  // ternary-coded this step: end_step has residuals and scales to commit
};

class Pactrain : public Compressor {
 public:
  Pactrain(Encoding encoding, bool error_feedback, bool previous_scale, uint64_t seed)
      : encoding_(encoding),
        error_feedback_(error_feedback),
        previous_scale_(previous_scale),
        seed_(seed) {}
  std::string name() const override { return "pactrain"; }
  bool runs_on_gpu() const override { return true; }

  std::string describe_buckets() const override {
    std::vector<std::string> parts;
    for (const auto& [index, plan] : plans_) {
      parts.push_back(plan.compact ? fmt::format("bucket {}: {} kept values as {}", index,
                                                 plan.values.numel(), encoding_name(plan.encoding))
                                   : fmt::format("bucket {}: dense", index));
    }
    return fmt::format("{}", fmt::join(parts, "; "));
  }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    Plan& plan = plans_[bucket.index];
    if (!plan_is_current(plan, bucket)) build_plan(plan, bucket, group);
    if (!plan.compact) {
      ++kernels_;  // the average's division, as in dense
      return group.all_reduce(bucket.flat, ReduceOp::avg);
    }
    keep_for_undo(plan.steps);
    ++plan.steps;
    plan.coded = plan.encoding == Encoding::ternary;
    pack(plan, bucket, group, plan.encoding);
    WorkPtr sums =
        group.all_reduce(plan.encoding == Encoding::fp32 ? plan.values : plan.wire, ReduceOp::sum);
    // Queued behind the values: the next step's scales travel while backward goes on.
    WorkPtr next_scales = plan.encoding == Encoding::ternary && previous_scale_
                              ? group.all_reduce(plan.next_scale, ReduceOp::max)
                              : nullptr;
    return then(sums, [this, &plan, &bucket, &group, next_scales] {
      if (plan.encoding != Encoding::fp32) unpack(plan, group.size(), plan.encoding);
      for (size_t e = 0; e < bucket.entries.size(); ++e)
        bucket.entries[e].param->set_compact_grad(plan.entry_grads[e]);
      if (next_scales) next_scales->wait();
    });
  }

  // The step's residuals and next scales become current only if the step is applied; a skipped
  // step leaves the plans as they were (the counters through keep_for_undo).
  void end_step(bool applied) override {
    for (auto& [index, plan] : plans_) {
      if (!plan.coded) continue;
      plan.coded = false;
      if (!applied) continue;
      if (error_feedback_) std::swap(plan.residual, plan.next_residual);
      if (previous_scale_) {
        std::swap(plan.scale, plan.next_scale);
        plan.scale_known = true;
      }
    }
    Compressor::end_step(applied);
  }

  // Per compact bucket: its step count (the ternary coin flips' seed), its encoding and the
  // ternary error feedback. The rest of a plan follows from the masks.
  StateDict state() const override {
    StateDict out;
    for (const auto& [index, plan] : plans_) {
      if (!plan.compact) continue;
      out[bucket_state_key(index, "steps")] = counter_tensor(static_cast<int64_t>(plan.steps));
      out[bucket_state_key(index, "encoding")] =
          counter_tensor(static_cast<int64_t>(plan.encoding));
      if (plan.residual.defined()) out[bucket_state_key(index, "residual")] = plan.residual;
      if (plan.scale_known) out[bucket_state_key(index, "scale")] = plan.scale;
    }
    return out;
  }

  // Builds the saved buckets' plans now, from the checkpoint's masks: if the pruner changes a mask
  // before the first step, the plan is rebuilt afresh, as it was in the run that was saved.
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
      Plan& plan = plans_[bucket.index];
      build_plan(plan, bucket, group, static_cast<Encoding>(encoding));
      PAC_CHECK(plan.compact,
                "compressor pactrain: the checkpoint has a compact plan for bucket {}, but its "
                "parameters have no pruned weights",
                bucket.index);
      plan.steps = static_cast<uint64_t>(read.counter(bucket_state_key(bucket.index, "steps")));
      if (plan.residual.defined())
        read.copy_into(bucket_state_key(bucket.index, "residual"), plan.residual);
      if (read.has(bucket_state_key(bucket.index, "scale"))) {
        read.copy_into(bucket_state_key(bucket.index, "scale"), plan.scale);
        plan.scale_known = true;
      }
    }
    read.finish();
  }

 private:
  static bool plan_is_current(const Plan& plan, const Bucket& bucket) {
    if (plan.mask_versions.size() != bucket.entries.size()) return false;
    for (size_t e = 0; e < bucket.entries.size(); ++e) {
      if (plan.mask_versions[e] != bucket.entries[e].param->mask_version()) return false;
    }
    return true;
  }

  // `restored`: the encoding a checkpoint recorded, instead of choosing one (enc=auto measures,
  // and a measurement would not repeat).
  void build_plan(Plan& plan, const Bucket& bucket, ProcessGroup& group,
                  std::optional<Encoding> restored = std::nullopt) {
    plan = Plan();
    plan.bucket = bucket.index;
    for (const auto& e : bucket.entries) plan.mask_versions.push_back(e.param->mask_version());
    PactrainLayout layout = pactrain_layout(bucket);
    plan.compact = layout.compact;
    if (!plan.compact) return;
    int64_t k = layout.values;
    // Everything the steps touch lives with the bucket; the positions are worked out on the host.
    const Device device = bucket.flat.device();
    plan.positions = Tensor::empty({k}, DType::i32);
    plan.values = Tensor::zeros({k}, DType::f32, device);
    int32_t* pos = plan.positions.data<int32_t>();
    int64_t at = 0;
    for (const auto& e : bucket.entries) {
      const nn::Parameter& p = *e.param;
      plan.entry_begin.push_back(at);
      plan.entry_grads.push_back(plan.values.view_flat(at, {p.kept_count()}));
      if (p.has_mask()) {
        Tensor kept_host = p.kept().cpu();
        const int32_t* kept = kept_host.data<int32_t>();
        for (int64_t j = 0, n = p.kept_count(); j < n; ++j) pos[at++] = e.offset + kept[j];
      } else {
        for (int64_t j = 0; j < e.numel; ++j) pos[at++] = e.offset + j;
      }
    }
    plan.entry_begin.push_back(at);
    const int64_t entries = static_cast<int64_t>(bucket.entries.size());
    plan.positions = plan.positions.to(device);
    plan.scale = Tensor::zeros({entries}, DType::f32, device);
    plan.next_scale = Tensor::zeros({entries}, DType::f32, device);
    plan.begin = Tensor::from_indices(plan.entry_begin, {entries + 1}).to(device);
    plan.encoding = restored                           ? *restored
                    : encoding_ == Encoding::automatic ? choose(plan, bucket, group)
                                                       : encoding_;
    allocate_wire(plan, group.size());
  }

  static void allocate_wire(Plan& plan, int world) {
    int64_t k = plan.values.numel();
    const Device device = plan.values.device();
    switch (plan.encoding) {
      case Encoding::fp32:
      case Encoding::automatic:
        plan.wire = Tensor();
        break;
      case Encoding::bf16:
        plan.wire = Tensor::zeros({k}, DType::bf16, device);
        break;
      case Encoding::fp16:
        plan.wire = Tensor::zeros({k}, DType::f16, device);
        break;
      case Encoding::ternary: {
        TernaryWire wire = ternary_wire(world);
        plan.wire = Tensor::zeros({wire.elements(k)}, wire.dtype, device);
        break;
      }
    }
    plan.residual =
        plan.encoding == Encoding::ternary ? Tensor::zeros({k}, DType::f32, device) : Tensor();
    plan.next_residual =
        plan.encoding == Encoding::ternary ? Tensor::zeros({k}, DType::f32, device) : Tensor();
  }

  // The seed of one step's ternary coin flips: different per rank, step and bucket.
  uint64_t coding_seed(const Plan& plan, int rank) const {
    return seed_ ^ (uint64_t(rank) << 32) ^ (plan.steps * 0x9e3779b97f4a7c15ull) ^
           (uint64_t(plan.bucket) << 52);
  }

  // pack() on the GPU: the same steps as kernels on the compute stream.
  void pack_gpu(Plan& plan, const Bucket& bucket, ProcessGroup& group, Encoding encoding) {
    const float* g = bucket.flat.data<float>();
    const int32_t* pos = plan.positions.data<int32_t>();
    const int64_t k = plan.positions.numel();
    if (encoding != Encoding::ternary) {
      Tensor& out = encoding == Encoding::fp32 ? plan.values : plan.wire;
      timed([&] {
        cuda::gather_scaled(g, pos, k, 1.0f / static_cast<float>(group.size()), out.raw_data(),
                            out.dtype());
      });
      return;
    }
    const int64_t entries = plan.begin.numel() - 1;
    const float* residual = error_feedback_ ? plan.residual.data<float>() : nullptr;
    float* next_residual = error_feedback_ ? plan.next_residual.data<float>() : nullptr;
    Tensor& maxima = previous_scale_ ? plan.next_scale : plan.scale;
    timed([&] {
      cuda::ternary_prepare(g, pos, residual, plan.values.data<float>(), plan.begin.data<int64_t>(),
                            entries, maxima.data<float>());
    });
    if (!previous_scale_ || !plan.scale_known) {
      if (previous_scale_) plan.scale.copy_(plan.next_scale);
      // On the GPU this orders the coding after the maxima's all-reduce; the host goes on.
      group.all_reduce(plan.scale, ReduceOp::max)->wait();
    }
    TernaryWire w = ternary_wire(group.size());
    timed([&] {
      cuda::ternary_encode(plan.values.data<float>(), plan.scale.data<float>(),
                           plan.begin.data<int64_t>(), entries, k, coding_seed(plan, group.rank()),
                           next_residual, plan.wire.raw_data(), {w.bits, w.per_word, w.dtype});
    });
  }

  void unpack_gpu(Plan& plan, int world, Encoding encoding) {
    const int64_t k = plan.values.numel();
    timed([&] {
      if (encoding == Encoding::ternary) {
        TernaryWire w = ternary_wire(world);
        cuda::ternary_decode(plan.wire.raw_data(), {w.bits, w.per_word, w.dtype}, world,
                             plan.scale.data<float>(), plan.begin.data<int64_t>(),
                             plan.begin.numel() - 1, k, plan.values.data<float>());
      } else {
        cuda::convert(plan.wire.raw_data(), plan.wire.dtype(), plan.values.data<float>(),
                      DType::f32, k);
      }
    });
  }

  // The fused gather: kept gradient entries / world, straight into the send buffer.
  void pack(Plan& plan, const Bucket& bucket, ProcessGroup& group, Encoding encoding) {
    if (bucket.flat.is_cuda()) return pack_gpu(plan, bucket, group, encoding);
    const float* g = bucket.flat.data<float>();
    const int32_t* pos = plan.positions.data<int32_t>();
    const int64_t k = plan.positions.numel();
    const float inv_world = 1.0f / static_cast<float>(group.size());
    if (encoding == Encoding::ternary) {
      pack_ternary(plan, g, group);
      return;
    }
    timed([&] {
      switch (encoding) {
        case Encoding::fp32: {
          float* v = plan.values.data<float>();
          for (int64_t j = 0; j < k; ++j) v[j] = g[pos[j]] * inv_world;
          break;
        }
        case Encoding::bf16: {
          BFloat16* w = plan.wire.data<BFloat16>();
          for (int64_t j = 0; j < k; ++j) w[j] = float_to_bf16(g[pos[j]] * inv_world);
          break;
        }
        case Encoding::fp16: {
          Half* w = plan.wire.data<Half>();
          for (int64_t j = 0; j < k; ++j) w[j] = float_to_half(g[pos[j]] * inv_world);
          break;
        }
        default:
          break;
      }
    });
  }

  // TernGrad on the kept entries, one scale per parameter: a single scale for a whole bucket would
  // be set by its largest gradient and code the small-gradient layers almost all to zero, with a
  // large variance. A fresh scale must be known on every rank before coding, so its all-reduce-max
  // is waited for here; scale=previous does without the wait. Queuing the coding on the
  // communication thread instead, so that backward never waits, was measured slower on CPU ranks
  // that share their cores with MPI's spinning progress loop (ResNet-18, 2 ranks on 2 cores,
  // 1 Gbit/s: 77 samples/s against 99 with the wait).
  void pack_ternary(Plan& plan, const float* g, ProcessGroup& group) {
    const int32_t* pos = plan.positions.data<int32_t>();
    const size_t entries = plan.entry_begin.size() - 1;
    float* e = plan.values.data<float>();  // the value to code: gradient plus residual
    const float* r = plan.residual.data<float>();
    // This step's maxima: the scales to code with (fresh), or the next step's (previous).
    float* maxima = previous_scale_ ? plan.next_scale.data<float>() : plan.scale.data<float>();
    timed([&] {
      for (size_t p = 0; p < entries; ++p) {
        float m = 0.0f;
        for (int64_t j = plan.entry_begin[p]; j < plan.entry_begin[p + 1]; ++j) {
          e[j] = error_feedback_ ? g[pos[j]] + r[j] : g[pos[j]];
          m = std::max(m, std::abs(e[j]));
        }
        maxima[p] = m;
      }
    });
    if (!previous_scale_ || !plan.scale_known) {
      if (previous_scale_) plan.scale.copy_(plan.next_scale);
      group.all_reduce(plan.scale, ReduceOp::max)->wait();
    }
    timed([&] {
      Generator gen(coding_seed(plan, group.rank()));
      float* res = plan.next_residual.data<float>();
      const float* scale = plan.scale.data<float>();
      TernaryWriter out(plan.wire, ternary_wire(group.size()));
      for (size_t p = 0; p < entries; ++p) {
        const float s = scale[p];
        for (int64_t j = plan.entry_begin[p]; j < plan.entry_begin[p + 1]; ++j) {
          // A value above the scale (scale=previous) has probability above 1: always sign(v).
          int t = s > 0.0f && gen.uniform() < std::abs(e[j]) / s ? (e[j] > 0.0f ? 1 : -1) : 0;
          out.put(t);
          if (error_feedback_) res[j] = e[j] - s * static_cast<float>(t);
        }
      }
      out.flush();
    });
  }

  // Decodes the reduced wire vector into the averaged compact gradient.
  void unpack(Plan& plan, int world, Encoding encoding) {
    if (plan.values.is_cuda()) return unpack_gpu(plan, world, encoding);
    timed([&] {
      float* v = plan.values.data<float>();
      const int64_t k = plan.values.numel();
      switch (encoding) {
        case Encoding::bf16: {
          const BFloat16* w = plan.wire.data<BFloat16>();
          for (int64_t j = 0; j < k; ++j) v[j] = bf16_to_float(w[j]);
          break;
        }
        case Encoding::fp16: {
          const Half* w = plan.wire.data<Half>();
          for (int64_t j = 0; j < k; ++j) v[j] = half_to_float(w[j]);
          break;
        }
        case Encoding::ternary: {
          TernaryReader sums(plan.wire, ternary_wire(world), world);
          for (size_t p = 0; p + 1 < plan.entry_begin.size(); ++p) {
            const float unit = plan.scale.data<float>()[p] / static_cast<float>(world);
            for (int64_t j = plan.entry_begin[p]; j < plan.entry_begin[p + 1]; ++j)
              v[j] = unit * static_cast<float>(sums.next());
          }
          break;
        }
        default:
          break;
      }
    });
  }

  // enc=auto: the rule in the header, from measurements averaged over the ranks.
  Encoding choose(Plan& plan, const Bucket& bucket, ProcessGroup& group) {
    using Clock = std::chrono::steady_clock;
    auto seconds = [](Clock::time_point t) {
      return std::chrono::duration<double>(Clock::now() - t).count();
    };
    // On the GPU the work is asynchronous: each measurement waits for the device to finish.
    const Device device = bucket.flat.device();
    auto finish = [&] {
      if (!device.is_cpu()) cuda_synchronize();
    };
    auto best_of_two = [&](const std::function<void()>& f) {
      double best = 1e30;
      for (int i = 0; i < 2; ++i) {
        finish();
        auto t = Clock::now();
        f();
        finish();
        best = std::min(best, seconds(t));
      }
      return best;
    };
    Tensor probe = Tensor::zeros({plan.values.numel()}, DType::f32, device);
    Tensor one = Tensor::zeros({1}, DType::f32, device);
    group.all_reduce(probe, ReduceOp::sum)->wait();  // warm-up
    double t_vector = best_of_two([&] { group.all_reduce(probe, ReduceOp::sum)->wait(); });
    double t_one = best_of_two([&] { group.all_reduce(one, ReduceOp::sum)->wait(); });
    std::vector<double> measured = {t_vector, t_one};
    const Encoding candidates[] = {Encoding::fp32, Encoding::bf16, Encoding::ternary};
    bool saved_ef = error_feedback_;
    error_feedback_ = false;  // calibration must not leave a residual behind
    for (Encoding e : candidates) {
      plan.encoding = e;
      allocate_wire(plan, group.size());
      double codec_before = codec_seconds_;
      uint64_t kernels_before = kernels_;
      finish();
      auto t = Clock::now();
      pack(plan, bucket, group, e);
      unpack(plan, group.size(), e);
      finish();
      // The ternary pack waits for its scale all-reduce; only the coding counts as codec time.
      double codec = e == Encoding::ternary ? codec_seconds_ - codec_before : seconds(t);
      codec_seconds_ = codec_before;
      kernels_ = kernels_before;
      measured.push_back(codec);
    }
    error_feedback_ = saved_ef;
    Tensor shared = Tensor::from_vector(std::vector<float>(measured.begin(), measured.end()),
                                        {static_cast<int64_t>(measured.size())});
    group.all_reduce(shared, ReduceOp::avg)->wait();
    auto m = shared.to_vector();
    double bandwidth_part = std::max(0.0, double(m[0]) - m[1]);
    const int64_t k = plan.values.numel();
    double ternary_bytes = double(ternary_wire(group.size()).bytes(k)) / double(k);
    double scale_wait = previous_scale_ ? 0.0 : m[1];
    double cost[] = {m[1] + bandwidth_part + m[2], m[1] + bandwidth_part * 0.5 + m[3],
                     m[1] + scale_wait + bandwidth_part * ternary_bytes / 4.0 + m[4]};
    int best = 0;
    for (int i = 1; i < 3; ++i) {
      if (cost[i] < cost[best]) best = i;
    }
    return candidates[best];
  }

  Encoding encoding_;
  bool error_feedback_;
  bool previous_scale_;
  uint64_t seed_;
  std::map<int, Plan> plans_;  // by bucket index; a map, so pending work's references stay valid
};

}  // namespace

std::unique_ptr<Compressor> make_pactrain(const CompressorOptions& options) {
  OptionReader read("pactrain", options);
  std::string enc = read.choice("enc", {"fp32", "bf16", "fp16", "ternary", "auto"});
  bool ef = read.flag("ef", false);
  std::string scale = read.choice("scale", {"fresh", "previous"});
  if (ef && !options.count("scale")) scale = "previous";  // the default with error feedback
  auto seed = static_cast<uint64_t>(read.number("seed", 0));
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
  return std::make_unique<Pactrain>(encoding, ef, scale == "previous", seed);
}

}  // namespace pac::comm
