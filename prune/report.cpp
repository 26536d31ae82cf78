#include "prune/report.h"

#include <map>

#include "comm/compressors/pactrain.h"
#include "comm/reducer.h"
#include "layers/attention.h"
#include "layers/conv2d.h"
#include "layers/embedding.h"
#include "layers/linear.h"

namespace pac::prune {

namespace {

double bytes_per_value(const std::string& encoding) {
  if (encoding == "fp32") return 4.0;
  if (encoding == "bf16" || encoding == "fp16") return 2.0;
  if (encoding == "ternary") return 0.0;  // packed: see bytes_per_step
  PAC_FAIL("prune report: encoding '{}' is not known; expected fp32, bf16, fp16 or ternary",
           encoding);
}

// Forward multiply-adds of weight `name` per sample: each kept weight is used once per output
// position (a pixel for a convolution, a token for a linear layer). -1 for weights that are not
// a convolution's, a linear layer's, an attention projection's or a tied output layer's (an
// embedding table that also gives the logits: its lookup is free, its product is not).
int64_t uses_per_sample(const std::string& name, std::map<std::string, nn::Module*>& modules,
                        std::map<std::string, Shape>& outputs) {
  auto dot = name.rfind('.');
  std::string module_name = dot == std::string::npos ? "" : name.substr(0, dot);
  std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  auto m = modules.find(module_name);
  if (m == modules.end()) return -1;
  if (dynamic_cast<nn::MultiHeadAttention*>(m->second) && leaf == "in_proj_weight") {
    // Once per token, as its out_proj: that one's output is recorded even where a block calls
    // the attention directly (a GPT's cached forward), which leaves the attention's own unseen.
    auto projected = outputs.find(module_name + ".out_proj");
    if (projected == outputs.end()) projected = outputs.find(module_name);
    if (projected == outputs.end()) return -1;
    return shape_numel(projected->second) / projected->second.back();
  }
  auto out = outputs.find(module_name);
  if (out == outputs.end()) return -1;
  const Shape& s = out->second;
  int64_t numel = shape_numel(s);
  if (dynamic_cast<nn::Conv2d*>(m->second) && leaf == "weight" && s.size() == 4)
    return numel / s[1];
  if (dynamic_cast<nn::Linear*>(m->second) && leaf == "weight") return numel / s.back();
  auto* embedding = dynamic_cast<nn::Embedding*>(m->second);
  if (embedding && embedding->tied_output && leaf == "weight") return numel / s.back();
  return -1;
}

std::string si(double value) {
  if (value >= 1e9) return fmt::format("{:.2f}G", value / 1e9);
  if (value >= 1e6) return fmt::format("{:.2f}M", value / 1e6);
  if (value >= 1e3) return fmt::format("{:.1f}k", value / 1e3);
  return fmt::format("{:.0f}", value);
}

}  // namespace

StepBytes bytes_per_step(nn::Module& model, const ReportOptions& options) {
  const double per_value = bytes_per_value(options.encoding);
  StepBytes bytes;
  // The layout only: no buffer is needed to count bytes.
  for (const auto& bucket :
       comm::make_buckets(model.named_parameters(),
                          comm::ReducerOptions{options.bucket_mb, options.first_bucket_mb, false},
                          /*allocate=*/false, [&](const nn::Parameter& p) {
                            return static_cast<double>(p.grad_numel()) *
                                   comm::pactrain_wire_bytes_per_value(
                                       p, options.encoding, options.world, options.levels);
                          })) {
    comm::PactrainLayout layout = comm::pactrain_layout(bucket);
    int64_t dense_values = 0;
    for (const auto& e : bucket.entries) dense_values += e.param->numel();
    bytes.dense += static_cast<uint64_t>(dense_values) * 4;
    // As the compressor does: with enc=fp32, or with no weights to code, a bucket with nothing
    // pruned goes dense; otherwise every bucket is coded.
    if (!layout.compact && (options.encoding == "fp32" || layout.coded_parameters == 0)) {
      bytes.pactrain += static_cast<uint64_t>(dense_values) * 4;
    } else if (options.encoding == "ternary") {
      // The weights' ternary sums packed (TernaryWire), one scale per weight shared by an
      // all-reduce-max, and the 1-D parameters in fp32.
      bytes.pactrain += static_cast<uint64_t>(
                            comm::ternary_wire(options.world, options.levels).bytes(layout.coded)) +
                        4 * static_cast<uint64_t>(layout.coded_parameters + layout.plain);
    } else {
      bytes.pactrain += static_cast<uint64_t>(layout.values * per_value);
    }
  }
  return bytes;
}

std::string prune_report(nn::Module& model, const ReportOptions& options) {
  std::map<std::string, nn::Module*> modules;
  for (auto& [name, m] : model.named_modules()) modules[name] = m;
  std::map<std::string, Shape> outputs;
  for (auto& [name, shape] : model.output_shapes(options.input)) outputs.emplace(name, shape);

  std::string out = fmt::format("{:<34} {:>16} {:>8} {:>10} {:>10} {:>10} {:>10}\n", "weight",
                                "shape", "density", "kept", "total", "MFLOP", "MFLOP eff");
  int64_t kept_all = 0, total_all = 0;
  double flops_all = 0, flops_kept = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (p->shape().size() < 2 && !p->has_mask()) continue;
    int64_t uses = uses_per_sample(name, modules, outputs);
    double dense_flops = uses > 0 ? 2.0 * p->numel() * uses : 0.0;
    double kept_flops = uses > 0 ? 2.0 * p->kept_count() * uses : 0.0;
    out += fmt::format("{:<34} {:>16} {:>7.1f}% {:>10} {:>10} {:>10} {:>10}\n", name,
                       shape_str(p->shape()), 100.0 * p->density(), p->kept_count(), p->numel(),
                       uses > 0 ? fmt::format("{:.2f}", dense_flops / 1e6) : "-",
                       uses > 0 ? fmt::format("{:.2f}", kept_flops / 1e6) : "-");
    kept_all += p->kept_count();
    total_all += p->numel();
    flops_all += dense_flops;
    flops_kept += kept_flops;
  }
  out += fmt::format("{:<34} {:>16} {:>7.1f}% {:>10} {:>10} {:>10.2f} {:>10.2f}\n", "total", "",
                     total_all ? 100.0 * kept_all / total_all : 100.0, kept_all, total_all,
                     flops_all / 1e6, flops_kept / 1e6);
  StepBytes bytes = bytes_per_step(model, options);
  double ring = 2.0 * (options.world - 1) / options.world;
  out += fmt::format(
      "gradient bytes per step (all-reduce payload): dense {}B, pactrain {} {}B = {:.3f}x dense; "
      "with {} ranks each sends {:.2f}x that on a ring{}\n",
      si(bytes.dense),
      options.levels > 1 ? fmt::format("{} (levels={})", options.encoding, options.levels)
                         : options.encoding,
      si(bytes.pactrain), bytes.dense ? static_cast<double>(bytes.pactrain) / bytes.dense : 1.0,
      options.world, ring,
      options.encoding == "ternary"
          ? " at most (the MPI group sends its partial sums narrower, and coded where shorter)"
          : "");
  return out;
}

}  // namespace pac::prune
