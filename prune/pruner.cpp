#include "prune/pruner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <utility>

#include "core/autograd.h"
#include "core/generator.h"
#include "layers/batch_norm.h"
#include "prune/mask_sync.h"
#include "prune/selection.h"

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

// The ranking's view of one parameter's scores (on the host): their values in the criterion's
// precision, and which units are still alive, held in `alive_units` (undefined while p is dense).
ScoreSpan unit_span(const nn::Parameter& p, Granularity g, const Tensor& scores,
                    Tensor& alive_units) {
  ScoreSpan span;
  span.count = scores.numel();
  if (scores.dtype() == DType::f32)
    span.f32 = scores.data<float>();
  else
    span.f64 = scores.data<double>();
  if (p.has_mask()) {
    Tensor mask = p.mask().cpu();
    if (g == Granularity::entry) {
      alive_units = mask;
    } else {
      alive_units = Tensor::empty({span.count}, DType::u8);
      for (int64_t u = 0; u < span.count; ++u)
        alive_units.data<uint8_t>()[u] = alive(mask.data<uint8_t>(), p, g, u);
    }
    span.alive = alive_units.data<uint8_t>();
  }
  return span;
}

}  // namespace

Pruner::Pruner(nn::Module& model, const PrunerOptions& options, comm::ProcessGroupPtr group,
               comm::Reducer* reducer)
    : model_(model),
      options_(options),
      group_(std::move(group)),
      reducer_(reducer),
      criterion_(make_criterion(options.criterion, options.criterion_options)),
      schedule_(options.schedule, options.sparsity, options.steps_per_epoch) {
  PAC_CHECK(options.scope.empty() || options.scope == "layer" || options.scope == "global",
            "--prune-scope '{}' is not known; expected layer or global", options.scope);
  const CriterionNeeds needs = criterion_->needs();
  PAC_CHECK(!(needs.global_scope && options.scope == "layer"),
            "--prune {} ranks weights across layers only: it needs --prune-scope global (its "
            "default), got layer",
            options.criterion);
  const bool wants_global = needs.global_scope || needs.global_by_default;
  scope_ = options.scope == "global" || (options.scope.empty() && wants_global) ? Scope::global
                                                                                : Scope::layer;
  options_.scope = scope_ == Scope::global ? "global" : "layer";
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
  if (waiting_.due) {
    Tensor sparsity = Tensor::zeros({1}, DType::f64);
    sparsity.data<double>()[0] = waiting_.sparsity;
    out["waiting_sparsity"] = sparsity;
    out["waiting_rewind"] = counter_tensor(waiting_.rewind ? 1 : 0);
  }
  return out;
}

void Pruner::load_state(const StateDict& state) {
  StateReader read("pruner", state);
  criterion_->load_state(read.section("criterion."), prunable_);
  auto named = model_.named_parameters();
  for (size_t i = 0; i < rewind_to_.size(); ++i)
    read.copy_into("rewind." + named[i].first, rewind_to_[i]);
  events_ = read.counter("events");
  waiting_ = PruneEvent{};
  if (read.has("waiting_sparsity")) {
    waiting_.due = true;
    waiting_.sparsity = read.tensor("waiting_sparsity", {1}, DType::f64).data<double>()[0];
    waiting_.rewind = read.counter("waiting_rewind") != 0;
  }
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
  // On every rank. Under step synchronisation the gradients are the reduced ones, so the ranks'
  // sums are the same; under local SGD and DiLoCo each rank's are its own (criterion.h says what
  // that asks of a criterion).
  criterion_->observe(prunable_);
}

StateDict Pruner::criterion_state() const { return criterion_->state(); }

void Pruner::load_criterion_state(const StateDict& state) {
  criterion_->load_state(state, prunable_);
}

PruneStep Pruner::step(int64_t step, ScoreContext& context, bool ranks_agree) {
  const PruneEvent now = schedule_.at(step);
  if (now.due) {
    // The schedule's sparsity only grows, so the latest event's target covers the earlier ones.
    waiting_.rewind = waiting_.rewind || now.rewind;
    waiting_.sparsity = now.sparsity;
    waiting_.due = true;
  }
  if (!waiting_.due || !ranks_agree) return {};
  MemoryTagScope tag(MemoryTag::pruning);
  const PruneEvent event = std::exchange(waiting_, PruneEvent{});
  // Masks only shrink: an event whose target the masks already meet (a gradual schedule's first,
  // at 0%) scores nothing, so an accumulating criterion keeps its sums for the next one.
  const bool prunes = event.sparsity > sparsity();
  if (prunes) prune_to(event.sparsity, context);
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
  return {prunes || event.rewind, event.rewind};
}

std::vector<Tensor> Pruner::keep_decisions(const std::vector<Tensor>& scores,
                                           double sparsity) const {
  const Granularity g = criterion_->granularity();
  // The ranking reads the scores where they are; a unit already pruned ranks below all
  // (checked_scores made the others finite).
  std::vector<ScoreSpan> spans(prunable_.size());
  std::vector<Tensor> alive_units(prunable_.size());
  for (size_t i = 0; i < prunable_.size(); ++i)
    spans[i] = unit_span(*prunable_[i].second, g, scores[i], alive_units[i]);
  std::vector<Tensor> keep(prunable_.size());
  std::vector<uint8_t*> keep_data(prunable_.size());
  for (size_t i = 0; i < prunable_.size(); ++i) {
    keep[i] = Tensor::empty({spans[i].count}, DType::u8);
    keep_data[i] = keep[i].data<uint8_t>();
  }
  if (scope_ == Scope::layer) {
    for (size_t i = 0; i < prunable_.size(); ++i) {
      int64_t k = std::max<int64_t>(1, std::llround((1.0 - sparsity) * spans[i].count));
      prune::keep_top({spans[i]}, k, {keep_data[i]});
    }
  } else {
    // Global pruning is layer pruning over the concatenated scores.
    int64_t total = 0;
    for (const auto& s : spans) total += s.count;
    prune::keep_top(spans, std::llround((1.0 - sparsity) * total), keep_data);
  }
  // Masks only shrink: a unit pruned before stays pruned.
  for (size_t i = 0; i < prunable_.size(); ++i) {
    if (!spans[i].alive) continue;
    for (int64_t u = 0; u < spans[i].count; ++u) keep_data[i][u] &= spans[i].alive[u];
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

std::vector<Tensor> Pruner::checked_scores(const std::vector<Tensor>& scores) const {
  const Granularity g = criterion_->granularity();
  PAC_CHECK(scores.size() == prunable_.size(),
            "criterion {} returned {} score tensors for {} parameters", criterion_->name(),
            scores.size(), prunable_.size());
  std::vector<Tensor> out;
  for (size_t i = 0; i < prunable_.size(); ++i) {
    const nn::Parameter& p = *prunable_[i].second;
    const int64_t units = units_of(p, g);
    PAC_CHECK(scores[i].defined() && scores[i].numel() == units &&
                  (scores[i].dtype() == DType::f32 || scores[i].dtype() == DType::f64),
              "criterion {} scored '{}' with {}, expected f32 or f64 with {} values",
              criterion_->name(), prunable_[i].first,
              scores[i].defined() ? scores[i].str() : "nothing", units);
    // Scores and masks are worked on on the host, whatever device the model is on: pruning
    // happens a handful of times in a run. They stay in the criterion's precision: the ranking
    // reads f32 and f64 alike, and a copy in f64 would double what an event holds.
    Tensor s = scores[i].cpu();
    Tensor alive_units;
    const ScoreSpan span = unit_span(p, g, s, alive_units);
    for (int64_t u = 0; u < units; ++u) {
      if (span.alive != nullptr && !span.alive[u]) continue;  // a pruned unit's score is unread
      const double v = span.at(u);
      PAC_CHECK(std::isfinite(v),
                "{}criterion {} gave '{}' a score of {} at {} {} (of {}); scores must be "
                "finite: return f64 scores for products that overflow f32, and look for a "
                "division by zero, a log of zero, or a NaN in the weights or gradients",
                group_->size() > 1 ? fmt::format("rank {}: ", group_->rank()) : "",
                criterion_->name(), prunable_[i].first, v,
                g == Granularity::entry ? "entry" : "channel", u, units);
    }
    out.push_back(s);
  }
  return out;
}

namespace {

// A parameter's values as one 64-bit number, to tell whether they changed without a copy.
uint64_t fingerprint(const Tensor& data) {
  Tensor host = data.cpu();
  const uint32_t* bits = static_cast<const uint32_t*>(host.raw_data());
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t i = 0, n = host.numel(); i < n; ++i) h = (h ^ bits[i]) * 0x100000001b3ull;
  return h;
}

// What a criterion may change while it scores, and puts back: every buffer, every module's
// train/eval flag, the default random stream, and the parameters' values (masked entries stay
// zero) when `keep_weights`. Otherwise only their fingerprints are kept: a copy of the weights is
// as large as the model, held at an event that should cost least.
class ModelSnapshot {
 public:
  ModelSnapshot(nn::Module& model, bool keep_weights)
      : model_(model),
        params_(model.named_parameters()),
        buffers_(model.named_buffers()),
        modes_(model.training_modes()),
        random_(default_generator().state()),
        keep_weights_(keep_weights) {
    for (const auto& [name, p] : params_) {
      if (keep_weights_)
        values_.push_back(p->data().clone());
      else
        fingerprints_.push_back(fingerprint(p->data()));
    }
    for (const auto& [name, b] : buffers_) buffer_values_.push_back(b.clone());
  }
  // Returns the name of a parameter that changed though the weights were not kept ("" if none).
  std::string restore() {
    NoGradGuard no_grad;
    std::string changed;
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor data = params_[i].second->data();
      if (keep_weights_) {
        data.copy_(values_[i]);
        params_[i].second->apply_mask(data);  // masks installed since the snapshot
      } else if (changed.empty() && fingerprint(data) != fingerprints_[i]) {
        changed = params_[i].first;
      }
    }
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].second.copy_(buffer_values_[i]);
    model_.set_training_modes(modes_);
    default_generator().set_state(random_);
    model_.zero_grad();  // the criterion's gradients are not the next step's
    return changed;
  }

 private:
  nn::Module& model_;
  std::vector<std::pair<std::string, nn::ParameterPtr>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<bool> modes_;
  Generator::State random_;
  bool keep_weights_;
  std::vector<Tensor> values_, buffer_values_;
  std::vector<uint64_t> fingerprints_;
};

}  // namespace

std::vector<Tensor> Pruner::score_on_every_rank(ScoreContext& context) {
  const CriterionNeeds needs = criterion_->needs();
  std::exception_ptr failure;
  std::vector<Tensor> scores;
  const auto start = std::chrono::steady_clock::now();
  {
    ModelSnapshot snapshot(model_, needs.changes_weights);
    const bool was_paused = reducer_ && reducer_->paused();  // local SGD pauses it between syncs
    if (reducer_) reducer_->set_paused(true);
    try {
      scores = checked_scores(criterion_->score(prunable_, context));
    } catch (...) {
      failure = std::current_exception();
    }
    const std::string changed = snapshot.restore();
    if (reducer_) reducer_->set_paused(was_paused);
    if (!failure && !changed.empty()) {
      failure = std::make_exception_ptr(Error(fmt::format(
          "criterion {} changed the weights of '{}' while scoring; a criterion that does must "
          "say so (CriterionNeeds::changes_weights) so that the Pruner puts them back",
          criterion_->name(), changed)));
    }
  }
  if (group_->size() == 1) {
    if (failure) std::rethrow_exception(failure);
    return scores;
  }
  // A peer may score for about as long as this rank did: the collectives that wait for it get
  // that much more than --comm-timeout, so a long scoring pass does not read as a dead rank.
  const double scored_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  comm::TimeoutAllowance allowance(*group_, scored_s);
  // Whether every rank scored: an error on one stops them all, each naming its own.
  const bool any_failed = comm::any_rank_failed(*group_, failure != nullptr);
  if (failure) std::rethrow_exception(failure);
  PAC_CHECK(!any_failed,
            "rank {}: another rank failed to score the pruning event (its error is on its output)",
            group_->rank());
  if (needs.data) {
    // Each rank scored its own batch: the average is the score over all of them, in one
    // collective, in f64. The scores become views into the averaged buffer.
    int64_t total = 0;
    for (const auto& s : scores) total += s.numel();
    Tensor flat = Tensor::empty({total}, DType::f64);
    int64_t at = 0;
    for (auto& s : scores) {
      Tensor slot = flat.view_flat(at, s.shape());
      slot.copy_(s.to(DType::f64));
      s = slot;
      at += s.numel();
    }
    group_->all_reduce(flat, comm::ReduceOp::avg)->wait();
  }
  return scores;
}

void Pruner::prune_to(double sparsity, ScoreContext& context) {
  PAC_CHECK(sparsity >= 0.0 && sparsity < 1.0, "pruning: sparsity {} must be in [0, 1)", sparsity);
  context.seed = options_.seed;
  context.event = events_++;
  context.scope = scope_;
  context.model = &model_;
  context.final_sparsity = sparsity;
  const int64_t rounds = criterion_->needs().rounds;
  // The density falls geometrically over the rounds, from today's to the target.
  const double start_density = 1.0 - this->sparsity(), end_density = 1.0 - sparsity;
  for (int64_t round = 0; round < rounds; ++round) {
    context.round = round;
    context.rounds = rounds;
    context.sparsity =
        round + 1 == rounds || start_density <= end_density
            ? sparsity
            : 1.0 - start_density * std::pow(end_density / start_density,
                                             static_cast<double>(round + 1) / rounds);
    std::vector<Tensor> scores = score_on_every_rank(context);
    // Rank 0 decides (the scores are the same everywhere, but one rank's masks are the masks).
    std::vector<Tensor> proposed;
    if (group_->rank() == 0) proposed = proposed_masks(keep_decisions(scores, context.sparsity));
    install_masks(*group_, masked_, proposed);
    if (group_->size() > 1) check_masks_agree(*group_, masked_);
  }
}

}  // namespace pac::prune
