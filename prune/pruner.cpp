#include "prune/pruner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "core/autograd.h"
#include "core/generator.h"
#include "layers/batch_norm.h"
#include "prune/mask_sync.h"

namespace pac::prune {

bool glob_match(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

// Marks the `k` largest of `n` scores in `keep` (ties go to the earlier position).
void keep_top(const float* scores, int64_t n, int64_t k, uint8_t* keep) {
  std::fill(keep, keep + n, uint8_t(0));
  if (k <= 0) return;
  if (k >= n) {
    std::fill(keep, keep + n, uint8_t(1));
    return;
  }
  std::vector<float> sorted(scores, scores + n);
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float threshold = sorted[k - 1];
  int64_t taken = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (scores[j] > threshold) keep[j] = 1, ++taken;
  }
  for (int64_t j = 0; j < n && taken < k; ++j) {
    if (scores[j] == threshold && !keep[j]) keep[j] = 1, ++taken;
  }
}

int64_t units_of(const nn::Parameter& p, Granularity g) {
  return g == Granularity::entry ? p.numel() : p.shape()[0];
}

// Whether unit u (an entry, or an output channel) of p has any entry still kept; `m` is p's
// mask on the host, or null while p is dense.
bool alive(const uint8_t* m, const nn::Parameter& p, Granularity g, int64_t u) {
  if (m == nullptr) return true;
  if (g == Granularity::entry) return m[u] != 0;
  int64_t fan_in = p.numel() / p.shape()[0];
  for (int64_t j = 0; j < fan_in; ++j) {
    if (m[u * fan_in + j]) return true;
  }
  return false;
}

}  // namespace

Pruner::Pruner(nn::Module& model, const PrunerOptions& options, comm::ProcessGroupPtr group)
    : model_(model),
      options_(options),
      group_(std::move(group)),
      criterion_(make_criterion(options.criterion)),
      schedule_(options.schedule, options.sparsity, options.steps_per_epoch) {
  PAC_CHECK(options.scope == "layer" || options.scope == "global",
            "--prune-scope '{}' is not known; expected layer or global", options.scope);
  auto named = model.named_parameters();
  for (const auto& pattern : options.exclude) {
    bool matched = std::any_of(named.begin(), named.end(),
                               [&](const auto& np) { return glob_match(pattern, np.first); });
    PAC_CHECK(matched, "--prune-exclude '{}' matches no parameter of {}", pattern,
              model.describe());
  }
  for (const auto& np : named) {
    bool excluded = std::any_of(options.exclude.begin(), options.exclude.end(),
                                [&](const std::string& pat) { return glob_match(pat, np.first); });
    // Biases and norm parameters (1-D) are never pruned: they are few and pruning them hurts.
    if (np.second->shape().size() >= 2 && !excluded) prunable_.push_back(np);
  }
  PAC_CHECK(!prunable_.empty(), "--prune: {} has no prunable weights left after --prune-exclude",
            model.describe());
  masked_ = prunable_;
  coupled_.resize(prunable_.size());

  if (criterion_->granularity() == Granularity::output_channel) {
    // A channel's bias and the batch norm that follows its layer go with it.
    for (auto& [parent_name, parent] : model.named_modules()) {
      auto children = parent->named_children();
      for (size_t c = 0; c < children.size(); ++c) {
        std::string prefix =
            parent_name.empty() ? children[c].first : parent_name + "." + children[c].first;
        auto it = std::find_if(prunable_.begin(), prunable_.end(),
                               [&](const auto& np) { return np.first == prefix + ".weight"; });
        if (it == prunable_.end()) continue;
        size_t index = it - prunable_.begin();
        int64_t channels = it->second->shape()[0];
        auto couple = [&](const std::string& name, const nn::ParameterPtr& p) {
          coupled_[index].push_back(p);
          masked_.emplace_back(name, p);
        };
        for (const auto& [pn, pp] : children[c].second->named_parameters()) {
          if (pn == "bias" && pp->numel() == channels) couple(prefix + ".bias", pp);
        }
        for (size_t next = c + 1; next < children.size(); ++next) {
          if (children[next].second->named_parameters().empty()) continue;
          auto* bn = dynamic_cast<nn::BatchNorm2d*>(children[next].second.get());
          std::string bn_name =
              parent_name.empty() ? children[next].first : parent_name + "." + children[next].first;
          if (bn && bn->weight->numel() == channels) {
            couple(bn_name + ".weight", bn->weight);
            couple(bn_name + ".bias", bn->bias);
          }
          break;
        }
      }
    }
  }
  if (schedule_.rewinds()) {
    for (const auto& [name, p] : named) rewind_to_.push_back(p->data().clone());
  }
}

std::string Pruner::describe() const {
  int64_t weights = 0;
  for (const auto& [name, p] : prunable_) weights += p->numel();
  return fmt::format(
      "{} to {:.0f}% sparsity ({} scope, schedule {}), {} tensors ({} weights) "
      "prunable{}",
      criterion_->name(), 100.0 * options_.sparsity, options_.scope, schedule_.describe(),
      prunable_.size(), weights,
      options_.exclude.empty() ? ""
                               : fmt::format(", excluding {}", fmt::join(options_.exclude, " ")));
}

StateDict Pruner::state() const {
  StateDict out;
  add_prefixed(out, "criterion.", criterion_->state());
  auto named = model_.named_parameters();
  for (size_t i = 0; i < rewind_to_.size(); ++i) out["rewind." + named[i].first] = rewind_to_[i];
  out["events"] = counter_tensor(events_);
  return out;
}

void Pruner::load_state(const StateDict& state) {
  StateReader read("pruner", state);
  criterion_->load_state(read.section("criterion."), prunable_);
  auto named = model_.named_parameters();
  for (size_t i = 0; i < rewind_to_.size(); ++i)
    read.copy_into("rewind." + named[i].first, rewind_to_[i]);
  events_ = read.counter("events");
  read.finish();
}

double Pruner::sparsity() const {
  int64_t kept = 0, total = 0;
  for (const auto& [name, p] : prunable_) {
    kept += p->kept_count();
    total += p->numel();
  }
  return total ? 1.0 - static_cast<double>(kept) / static_cast<double>(total) : 0.0;
}

void Pruner::observe() {
  if (group_->rank() == 0) criterion_->observe(prunable_);
}

PruneStep Pruner::step(int64_t step, ScoreContext& context) {
  PruneEvent event = schedule_.at(step);
  if (!event.due) return {};
  prune_to(event.sparsity, context);
  if (event.rewind) {
    NoGradGuard no_grad;
    auto named = model_.named_parameters();
    for (size_t i = 0; i < named.size(); ++i) {
      Tensor data = named[i].second->data();
      NoGradGuard no_grad;
      data.copy_(rewind_to_[i]);
      named[i].second->apply_mask(data);
    }
  }
  return {true, event.rewind};
}

std::vector<Tensor> Pruner::keep_decisions(const std::vector<Tensor>& scores,
                                           double sparsity) const {
  const Granularity g = criterion_->granularity();
  PAC_CHECK(scores.size() == prunable_.size(),
            "criterion {} returned {} score tensors for {} "
            "parameters",
            criterion_->name(), scores.size(), prunable_.size());
  // Scores of units already pruned, or not numbers, sink to the bottom.
  std::vector<std::vector<float>> unit_scores(prunable_.size());
  for (size_t i = 0; i < prunable_.size(); ++i) {
    const nn::Parameter& p = *prunable_[i].second;
    int64_t units = units_of(p, g);
    PAC_CHECK(scores[i].numel() == units && scores[i].dtype() == DType::f32,
              "criterion {} scored '{}' with {}, expected f32 with {} values", criterion_->name(),
              prunable_[i].first, scores[i].str(), units);
    // Scores and masks are worked on on the host, whatever device the model is on: pruning
    // happens a handful of times in a run.
    Tensor score = scores[i].cpu();
    const float* s = score.data<float>();
    Tensor mask = p.has_mask() ? p.mask().cpu() : Tensor();
    const uint8_t* m = mask.defined() ? mask.data<uint8_t>() : nullptr;
    unit_scores[i].resize(units);
    for (int64_t u = 0; u < units; ++u) {
      bool usable = alive(m, p, g, u) && !std::isnan(s[u]);
      unit_scores[i][u] = usable ? s[u] : -std::numeric_limits<float>::infinity();
    }
  }
  std::vector<Tensor> keep(prunable_.size());
  for (size_t i = 0; i < prunable_.size(); ++i)
    keep[i] = Tensor::zeros({static_cast<int64_t>(unit_scores[i].size())}, DType::u8);
  if (options_.scope == "layer") {
    for (size_t i = 0; i < prunable_.size(); ++i) {
      int64_t units = static_cast<int64_t>(unit_scores[i].size());
      int64_t k = std::max<int64_t>(1, std::llround((1.0 - sparsity) * units));
      keep_top(unit_scores[i].data(), units, k, keep[i].data<uint8_t>());
    }
  } else {
    // Global pruning is layer pruning over the concatenated scores.
    std::vector<float> all;
    for (const auto& s : unit_scores) all.insert(all.end(), s.begin(), s.end());
    std::vector<uint8_t> kept(all.size());
    int64_t total = static_cast<int64_t>(all.size());
    keep_top(all.data(), total, std::llround((1.0 - sparsity) * total), kept.data());
    size_t at = 0;
    for (size_t i = 0; i < prunable_.size(); ++i) {
      std::copy(kept.begin() + at, kept.begin() + at + unit_scores[i].size(),
                keep[i].data<uint8_t>());
      at += unit_scores[i].size();
    }
  }
  // Masks only shrink: a unit pruned before stays pruned.
  for (size_t i = 0; i < prunable_.size(); ++i) {
    uint8_t* k = keep[i].data<uint8_t>();
    for (int64_t u = 0, n = keep[i].numel(); u < n; ++u)
      k[u] = k[u] && unit_scores[i][u] != -std::numeric_limits<float>::infinity();
  }
  return keep;
}

std::vector<Tensor> Pruner::proposed_masks(const std::vector<Tensor>& keep) const {
  const Granularity g = criterion_->granularity();
  // Aligned with masked_: the prunable parameters first, then the coupled ones.
  std::vector<Tensor> masks(masked_.size());
  auto slot = [&](const nn::ParameterPtr& p) -> Tensor& {
    for (size_t m = 0; m < masked_.size(); ++m) {
      if (masked_[m].second == p) return masks[m];
    }
    PAC_FAIL("pruning: a coupled parameter is not among the masked ones");
  };
  auto current = [](const nn::Parameter& p) {
    return p.has_mask() ? p.mask().cpu().clone() : Tensor::full(p.shape(), 1.0f).to(DType::u8);
  };
  for (size_t i = 0; i < prunable_.size(); ++i) {
    const nn::Parameter& p = *prunable_[i].second;
    const uint8_t* k = keep[i].data<uint8_t>();
    if (g == Granularity::entry) {
      masks[i] = keep[i].view_flat(0, p.shape());
      continue;
    }
    int64_t channels = p.shape()[0], fan_in = p.numel() / channels;
    masks[i] = current(p);
    uint8_t* m = masks[i].data<uint8_t>();
    for (int64_t c = 0; c < channels; ++c) {
      if (!k[c]) std::fill(m + c * fan_in, m + (c + 1) * fan_in, uint8_t(0));
    }
    for (const auto& coupled : coupled_[i]) {
      Tensor& cm = slot(coupled);
      cm = current(*coupled);
      uint8_t* pm = cm.data<uint8_t>();
      for (int64_t c = 0; c < channels; ++c) pm[c] = pm[c] && k[c];
    }
  }
  return masks;
}

void Pruner::prune_to(double sparsity, ScoreContext& context) {
  PAC_CHECK(sparsity >= 0.0 && sparsity < 1.0, "pruning: sparsity {} must be in [0, 1)", sparsity);
  context.seed = options_.seed;
  context.event = events_++;
  // Rank 0 decides; whether it succeeded is broadcast first, so that an error there stops every
  // rank instead of leaving them waiting for masks.
  std::exception_ptr failure;
  std::vector<Tensor> proposed;
  if (group_->rank() == 0) {
    // A criterion's own passes (snip's gradient on a batch, in training mode) run on rank 0
    // alone: what they change in the model's buffers (batch-norm running statistics) or in the
    // random stream (dropout) is put back, so that the ranks stay identical.
    auto buffers = model_.named_buffers();
    std::vector<Tensor> saved;
    for (const auto& [name, b] : buffers) saved.push_back(b.clone());
    const Generator::State random = default_generator().state();
    try {
      proposed = proposed_masks(keep_decisions(criterion_->score(prunable_, context), sparsity));
    } catch (...) {
      failure = std::current_exception();
    }
    NoGradGuard no_grad;
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second.copy_(saved[i]);
    default_generator().set_state(random);
  }
  Tensor ok = Tensor::full({1}, failure ? 0.0f : 1.0f);
  if (group_->size() > 1) group_->broadcast(ok, 0)->wait();
  if (failure) std::rethrow_exception(failure);
  PAC_CHECK(ok.item() == 1.0f,
            "rank {}: rank 0 failed to compute the pruning masks (its error is "
            "on its output)",
            group_->rank());
  install_masks(*group_, masked_, proposed);
  if (group_->size() > 1) check_masks_agree(*group_, masked_);
}

}  // namespace pac::prune
