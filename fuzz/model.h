// The model the checkpoint fuzz target loads into: a ViT small enough that a checkpoint of it
// (weights, masks, optimizer state) is a few kilobytes, which keeps the fuzzer fast.
#pragma once

#include "apps/models/registry.h"

namespace pac::fuzz {

inline models::ModelConfig model_config() {
  models::ModelConfig c;
  c.name = "vit";
  c.in_channels = 1;
  c.num_classes = 3;
  c.image_size = 8;
  c.patch = 4;
  c.dim = 8;
  c.depth = 1;
  c.heads = 2;
  c.mlp_dim = 8;
  return c;
}

}  // namespace pac::fuzz
