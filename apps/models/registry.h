// The models the apps can build by name, from one configuration struct that the command line
// fills in and a checkpoint records.
#pragma once

#include <string>
#include <vector>

#include "apps/models/gpt.h"
#include "apps/models/resnet.h"
#include "apps/models/vit.h"

namespace pac::models {

struct ModelConfig {
  std::string name = "resnet20";
  int64_t in_channels = 1, num_classes = 10, image_size = 28;
  bool small_input = false;  // ResNet-18/34/50
  // Transformer sizes (0 = the preset's value, or the "vit" and "gpt" defaults)
  int64_t patch = 4, dim = 0, depth = 0, heads = 0, mlp_dim = 0;
  float dropout = 0.0f;
  // GPT: tokens of context, and the vocabulary (0 = from the data; a checkpoint keeps the
  // characters themselves in `vocab`, so that generation needs no text file).
  int64_t vocab_size = 0, context = 0;
  std::string vocab;
  // An image folder's classes (classes[label]) and the per-channel normalisation its images had
  // (on the [0, 1] scale): kept so that a checkpoint is evaluated on the same classes and inputs.
  // Empty for the in-memory data sets, which normalise by their own statistics.
  std::vector<std::string> classes;
  std::vector<float> normalize_mean, normalize_std;
};

std::vector<std::string> model_names();
nn::ModulePtr make_model(const ModelConfig& config);
// The shape of one input sample batch of `batch`: [batch, C, H, W] for images, [batch, context]
// of tokens for a GPT.
Shape example_input_shape(const ModelConfig& config, int64_t batch = 1);

}  // namespace pac::models
