// The models the apps can build by name, from one configuration struct that the command line
// fills in and a checkpoint records.
#pragma once

#include <string>
#include <vector>

#include "apps/models/resnet.h"
#include "apps/models/vit.h"

namespace pac::models {

struct ModelConfig {
  std::string name = "resnet20";
  int64_t in_channels = 1, num_classes = 10, image_size = 28;
  bool small_input = false;  // ResNet-18/34/50
  // ViT sizes (0 = the preset's value, or the "vit" defaults below)
  int64_t patch = 4, dim = 0, depth = 0, heads = 0, mlp_dim = 0;
  float dropout = 0.0f;
};

std::vector<std::string> model_names();
nn::ModulePtr make_model(const ModelConfig& config);

}  // namespace pac::models
