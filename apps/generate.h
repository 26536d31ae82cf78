// `pactrain generate`: text from a GPT checkpoint. The prompt is encoded with the vocabulary the
// checkpoint carries, then each new character is drawn from the last position's logits (divided
// by the temperature, cut to the top k) and fed back through the key-value cache, so N characters
// cost N one-token passes. When the context is full the cache restarts from its last half (one
// pass over those tokens), as a window that slides in steps of half the context.
#pragma once

#include <string>

#include "apps/data/text.h"
#include "apps/models/gpt.h"

namespace pac {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt = "\n";
  int64_t tokens = 300;
  float temperature = 1.0f;
  int64_t top_k = 0;  // 0: every token
  uint64_t seed = 0;
};

// The `tokens` characters that follow the prompt.
std::string generate(models::GPT& model, const data::CharVocab& vocab,
                     const GenerateOptions& options);
// Loads the checkpoint and generates: the prompt followed by its continuation.
std::string generate_from_checkpoint(const GenerateOptions& options);

}  // namespace pac
