#include "apps/checkpoint.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/safetensors.h"
#include "core/autograd.h"
#include "core/generator.h"

namespace pac {

namespace {
constexpr const char* kFormat = "pactrain-checkpoint-1";
}

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
                      {"dropout", c.dropout}};
  return j.dump();
}

models::ModelConfig model_config_from_json(const std::string& text, const std::string& path) {
  try {
    auto j = nlohmann::json::parse(text);
    models::ModelConfig c;
    c.name = j.at("name").get<std::string>();
    c.in_channels = j.at("in_channels").get<int64_t>();
    c.num_classes = j.at("num_classes").get<int64_t>();
    c.image_size = j.at("image_size").get<int64_t>();
    c.small_input = j.at("small_input").get<bool>();
    c.patch = j.at("patch").get<int64_t>();
    c.dim = j.at("dim").get<int64_t>();
    c.depth = j.at("depth").get<int64_t>();
    c.heads = j.at("heads").get<int64_t>();
    c.mlp_dim = j.at("mlp_dim").get<int64_t>();
    c.dropout = j.at("dropout").get<float>();
    return c;
  } catch (const nlohmann::json::exception& e) {
    PAC_FAIL("{}: the model configuration in the metadata is malformed: {}", path, e.what());
  }
}

void save_checkpoint(const std::string& path, const models::ModelConfig& config, nn::Module& model,
                     const optim::Optimizer* optimizer, const RunPosition& position,
                     const std::string& optimizer_name) {
  TensorFile file;
  for (auto& [name, p] : model.named_parameters()) {
    file.tensors[name] = p->data().detach();
    if (p->has_mask()) file.tensors[name + ".mask"] = p->mask();
  }
  for (auto& [name, b] : model.named_buffers()) file.tensors[name] = b;
  if (optimizer) {
    for (auto& [name, t] : optimizer->state()) file.tensors["optimizer." + name] = t;
  }
  auto state = default_generator().state();
  file.metadata = {
      {"format", kFormat},
      {"model", model_config_json(config)},
      {"step", std::to_string(position.step)},
      {"epoch", std::to_string(position.epoch)},
      {"batch", std::to_string(position.batch)},
      {"world_size", std::to_string(position.world_size)},
      {"optimizer", optimizer_name},
      {"generator", fmt::format("{} {} {} {}", state[0], state[1], state[2], state[3])},
  };
  save_safetensors(path, file);
}

static const std::string& require_metadata(const TensorFile& file, const std::string& key,
                                           const std::string& path) {
  auto it = file.metadata.find(key);
  PAC_CHECK(it != file.metadata.end(), "{}: not a pactrain checkpoint (no '{}' in the metadata)",
            path, key);
  return it->second;
}

models::ModelConfig read_checkpoint_config(const std::string& path) {
  TensorFile file = load_safetensors(path);
  PAC_CHECK(require_metadata(file, "format", path) == kFormat,
            "{}: checkpoint format '{}' is not the supported '{}'", path,
            file.metadata.at("format"), kFormat);
  return model_config_from_json(require_metadata(file, "model", path), path);
}

LoadedCheckpoint load_checkpoint(const std::string& path, const models::ModelConfig& expected,
                                 nn::Module& model, optim::Optimizer* optimizer) {
  TensorFile file = load_safetensors(path);
  PAC_CHECK(require_metadata(file, "format", path) == kFormat,
            "{}: checkpoint format '{}' is not the supported '{}'", path,
            file.metadata.at("format"), kFormat);
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
  std::map<std::string, Tensor> optimizer_state;
  for (auto it = file.tensors.begin(); it != file.tensors.end();) {
    if (it->first.rfind("optimizer.", 0) == 0) {
      optimizer_state[it->first.substr(10)] = it->second;
      it = file.tensors.erase(it);
    } else {
      ++it;
    }
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
  out.position = {number("step"), number("epoch"), number("batch"), world_size};
  out.optimizer_name = require_metadata(file, "optimizer", path);
  if (optimizer) {
    Generator::State state;
    std::istringstream words(require_metadata(file, "generator", path));
    for (auto& word : state) words >> word;
    PAC_CHECK(!words.fail(), "{}: metadata 'generator' is not four integers", path);
    default_generator().set_state(state);
  }
  return out;
}

}  // namespace pac
