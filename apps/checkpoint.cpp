#include "apps/checkpoint.h"

#include <nlohmann/json.hpp>

#include "apps/safetensors.h"
#include "core/autograd.h"

namespace pac {

namespace {
// Version 2 added the per-rank compressor and generator state and the pruner state. A version 1
// file still loads for evaluation, but a run cannot resume from it exactly.
constexpr const char* kFormat = "pactrain-checkpoint-2";
constexpr const char* kFormatWithoutRunState = "pactrain-checkpoint-1";
}  // namespace

std::string model_config_json(const models::ModelConfig& c) {
  nlohmann::json j = {{"name", c.name},
                      {"in_channels", c.in_channels},
                      {"num_classes", c.num_classes},
                      {"image_size", c.image_size},
                      {"small_input", c.small_input},
                      {"patch", c.patch},
                      {"dim", c.dim},
                      {"depth", c.depth},
                      {"heads", c.heads},
                      {"mlp_dim", c.mlp_dim},
                      {"dropout", c.dropout},
                      {"vocab_size", c.vocab_size},
                      {"context", c.context},
                      {"vocab", c.vocab}};
  if (!c.classes.empty()) j["classes"] = c.classes;
  if (!c.normalize_mean.empty()) {
    j["normalize_mean"] = c.normalize_mean;
    j["normalize_std"] = c.normalize_std;
  }
  return j.dump();
}

models::ModelConfig model_config_from_json(const std::string& text, const std::string& path) {
  try {
    auto j = nlohmann::json::parse(text);
    // Numbers are checked for their kind before they are converted: converting 1e30 to an
    // integer is undefined. `pactrain eval` builds the model from these numbers, so a damaged or
    // crafted file must not make it allocate without bound either.
    auto integer = [&](const char* key, int64_t low, int64_t high) {
      const auto& v = j.at(key);
      PAC_CHECK(v.is_number_integer(), "{}: the model configuration's {} is not an integer", path,
                key);
      int64_t value = v.get<int64_t>();
      PAC_CHECK(value >= low && value <= high && !(v.is_number_unsigned() && value < 0),
                "{}: the model configuration has {} = {}, expected {} to {}", path, key, v.dump(),
                low, high);
      return value;
    };
    models::ModelConfig c;
    c.name = j.at("name").get<std::string>();
    // 0: not an image model (a GPT's input is tokens)
    c.in_channels = integer("in_channels", 0, 1024);
    c.num_classes = integer("num_classes", 0, 1 << 20);
    c.image_size = integer("image_size", 0, 4096);
    c.small_input = j.at("small_input").get<bool>();
    c.patch = integer("patch", 1, 4096);
    c.dim = integer("dim", 0, 1 << 16);
    c.depth = integer("depth", 0, 1024);
    c.heads = integer("heads", 0, 1024);
    c.mlp_dim = integer("mlp_dim", 0, 1 << 18);
    const auto& dropout = j.at("dropout");
    PAC_CHECK(dropout.is_number() && dropout.get<double>() >= 0.0 && dropout.get<double>() < 1.0,
              "{}: the model configuration has dropout = {}, expected at least 0 and below 1", path,
              dropout.dump());
    c.dropout = static_cast<float>(dropout.get<double>());
    // Files written before language models have none of these.
    if (j.contains("vocab_size")) {
      c.vocab_size = integer("vocab_size", 0, 1 << 24);
      c.context = integer("context", 0, 1 << 20);
      c.vocab = j.at("vocab").get<std::string>();
    }
    // Image-folder models only.
    if (j.contains("classes")) {
      c.classes = j.at("classes").get<std::vector<std::string>>();
      PAC_CHECK(static_cast<int64_t>(c.classes.size()) == c.num_classes,
                "{}: the model configuration names {} classes for {} outputs", path,
                c.classes.size(), c.num_classes);
    }
    if (j.contains("normalize_mean")) {
      c.normalize_mean = j.at("normalize_mean").get<std::vector<float>>();
      c.normalize_std = j.at("normalize_std").get<std::vector<float>>();
      PAC_CHECK(c.normalize_mean.size() == 3 && c.normalize_std.size() == 3,
                "{}: the model configuration's normalisation has {} means and {} deviations, "
                "expected 3 of each",
                path, c.normalize_mean.size(), c.normalize_std.size());
    }
    return c;
  } catch (const nlohmann::json::exception& e) {
    PAC_FAIL("{}: the model configuration in the metadata is malformed: {}", path, e.what());
  }
}

uint64_t checkpoint_bytes(const nn::Module& model, const optim::Optimizer* optimizer,
                          const StateDict& rank_state, int world) {
  uint64_t bytes = 0;
  for (const auto& [name, p] : model.named_parameters()) bytes += p->data().nbytes();
  for (const auto& [name, b] : model.named_buffers()) bytes += b.nbytes();
  if (optimizer) {
    for (const auto& [name, t] : optimizer->state()) bytes += t.nbytes();
  }
  for (const auto& [name, t] : rank_state) bytes += t.nbytes() * static_cast<uint64_t>(world);
  return bytes;
}

void save_checkpoint(const std::string& path, const models::ModelConfig& config, nn::Module& model,
                     const optim::Optimizer* optimizer, const RunPosition& position,
                     const std::string& optimizer_name, const RunState& run,
                     const std::string& recipe) {
  TensorFile file;
  for (auto& [name, p] : model.named_parameters()) {
    file.tensors[name] = p->data().detach();
    if (p->has_mask()) file.tensors[name + ".mask"] = p->mask();
  }
  for (auto& [name, b] : model.named_buffers()) file.tensors[name] = b;
  if (optimizer) {
    for (auto& [name, t] : optimizer->state()) file.tensors["optimizer." + name] = t;
  }
  add_prefixed(file.tensors, "pruner.", run.pruner);
  add_prefixed(file.tensors, "reducer.", run.reducer);
  add_prefixed(file.tensors, "grad_scaler.", run.grad_scaler);
  for (size_t r = 0; r < run.ranks.size(); ++r)
    add_prefixed(file.tensors, "rank" + std::to_string(r) + ".", run.ranks[r]);
  file.metadata = {
      {"format", kFormat},
      {"model", model_config_json(config)},
      {"step", std::to_string(position.step)},
      {"epoch", std::to_string(position.epoch)},
      {"batch", std::to_string(position.batch)},
      {"world_size", std::to_string(position.world_size)},
      {"global_batch", std::to_string(position.global_batch)},
      {"optimizer", optimizer_name},
      {"compressor", run.compressor},
      {"prune", run.prune},
      {"sync", run.sync},
  };
  if (!recipe.empty()) file.metadata["recipe"] = recipe;
  save_safetensors(path, file);
}

static void require_format(const TensorFile& file, const std::string& path);

static const std::string& require_metadata(const TensorFile& file, const std::string& key,
                                           const std::string& path) {
  auto it = file.metadata.find(key);
  PAC_CHECK(it != file.metadata.end(), "{}: not a pactrain checkpoint (no '{}' in the metadata)",
            path, key);
  return it->second;
}

static void require_format(const TensorFile& file, const std::string& path) {
  const std::string& format = require_metadata(file, "format", path);
  PAC_CHECK(format == kFormat || format == kFormatWithoutRunState,
            "{}: checkpoint format '{}' is not one this version reads ('{}' or '{}')", path, format,
            kFormat, kFormatWithoutRunState);
}

models::ModelConfig read_checkpoint_config(const std::string& path) {
  TensorFile file = load_safetensors(path);
  require_format(file, path);
  return model_config_from_json(require_metadata(file, "model", path), path);
}

LoadedCheckpoint load_checkpoint(const std::string& path, const models::ModelConfig& expected,
                                 nn::Module& model, optim::Optimizer* optimizer) {
  return load_checkpoint(load_safetensors(path), path, expected, model, optimizer);
}

LoadedCheckpoint load_checkpoint(TensorFile file, const std::string& path,
                                 const models::ModelConfig& expected, nn::Module& model,
                                 optim::Optimizer* optimizer) {
  require_format(file, path);
  LoadedCheckpoint out;
  out.config = model_config_from_json(require_metadata(file, "model", path), path);
  PAC_CHECK(model_config_json(out.config) == model_config_json(expected),
            "{}: checkpoint is of another model: it holds {}, this run builds {}", path,
            model_config_json(out.config), model_config_json(expected));
  auto take = [&](const std::string& name, const Shape& shape) -> Tensor {
    auto it = file.tensors.find(name);
    PAC_CHECK(it != file.tensors.end(), "{}: checkpoint has no tensor '{}'", path, name);
    PAC_CHECK(it->second.shape() == shape, "{}: '{}' is {} in the checkpoint, {} in the model",
              path, name, it->second.str(), shape_str(shape));
    Tensor t = it->second;
    file.tensors.erase(it);
    return t;
  };
  NoGradGuard no_grad;
  for (auto& [name, p] : model.named_parameters()) {
    Tensor data = p->data();
    data.copy_(take(name, p->shape()));
    if (file.tensors.count(name + ".mask")) {
      p->set_mask(take(name + ".mask", p->shape()));
    } else {
      p->clear_mask();
    }
  }
  for (auto& [name, b] : model.named_buffers()) b.copy_(take(name, b.shape()));
  // The state beyond the model, by prefix; what is left must be nothing.
  std::map<std::string, Tensor> optimizer_state;
  std::map<int64_t, StateDict> ranks;
  for (auto it = file.tensors.begin(); it != file.tensors.end();) {
    const std::string& key = it->first;
    size_t dot = key.find('.');
    if (key.rfind("optimizer.", 0) == 0) {
      optimizer_state[key.substr(10)] = it->second;
    } else if (key.rfind("pruner.", 0) == 0) {
      out.run.pruner[key.substr(7)] = it->second;
    } else if (key.rfind("reducer.", 0) == 0) {
      out.run.reducer[key.substr(8)] = it->second;
    } else if (key.rfind("grad_scaler.", 0) == 0) {
      out.run.grad_scaler[key.substr(12)] = it->second;
    } else if (key.rfind("rank", 0) == 0 && dot != std::string::npos && dot > 4 &&
               key.find_first_not_of("0123456789", 4) == dot && dot - 4 <= 6) {
      ranks[std::stoll(key.substr(4, dot - 4))][key.substr(dot + 1)] = it->second;
    } else {
      ++it;
      continue;
    }
    it = file.tensors.erase(it);
  }
  PAC_CHECK(file.tensors.empty(), "{}: checkpoint holds '{}', which this model does not have", path,
            file.tensors.empty() ? "" : file.tensors.begin()->first);
  if (optimizer) {
    PAC_CHECK(!optimizer_state.empty(), "{}: checkpoint has no optimizer state to resume", path);
    optimizer->load_state(optimizer_state);
  }
  auto number = [&](const char* key) {
    try {
      return std::stoll(require_metadata(file, key, path));
    } catch (const std::logic_error&) {
      PAC_FAIL("{}: metadata '{}' is not an integer", path, key);
    }
  };
  // Checkpoints from before data-parallel training have no world size: they were single-process.
  int64_t world_size = file.metadata.count("world_size") ? number("world_size") : 1;
  out.position = {number("step"), number("epoch"), number("batch"), world_size,
                  file.metadata.count("global_batch") ? number("global_batch") : 0};
  out.optimizer_name = require_metadata(file, "optimizer", path);
  if (optimizer) {
    PAC_CHECK(file.metadata.at("format") == kFormat,
              "{}: a '{}' checkpoint lacks the compressor, pruner and generator state a run needs "
              "to resume exactly; it can be evaluated, not resumed",
              path, kFormatWithoutRunState);
    out.run.compressor = require_metadata(file, "compressor", path);
    out.run.prune = require_metadata(file, "prune", path);
    // Checkpoints from before --sync local and diloco could be resumed were all step.
    out.run.sync = file.metadata.count("sync") ? file.metadata.at("sync") : "step";
    for (const auto& [r, state] : ranks) {
      PAC_CHECK(r == static_cast<int64_t>(out.run.ranks.size()),
                "{}: checkpoint has state for rank {} but none for rank {}", path, r,
                out.run.ranks.size());
      out.run.ranks.push_back(state);
    }
    PAC_CHECK(static_cast<int64_t>(out.run.ranks.size()) == world_size,
              "{}: checkpoint holds the state of {} ranks, but says it was written by {}", path,
              out.run.ranks.size(), world_size);
  }
  return out;
}

}  // namespace pac
