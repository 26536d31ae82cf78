// Text for language models, one token per character: a vocabulary built from the text's own
// characters (Unicode code points of UTF-8, in code-point order, as nanoGPT's shakespeare_char),
// the first 90% of the tokens for training and the rest for validation, and a loader of random
// windows. The vocabulary travels in the checkpoint, so `pactrain generate` needs no text file.
#pragma once

#include <string>
#include <vector>

#include "apps/data/batch.h"

namespace pac::data {

class CharVocab {
 public:
  CharVocab() = default;
  // `chars`: the characters in token order, as one UTF-8 string (what a checkpoint stores).
  explicit CharVocab(const std::string& chars);
  // Every distinct character of `text`, in code-point order.
  static CharVocab of_text(const std::string& text, const std::string& source);

  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  std::string chars() const;
  // i64 [n] tokens; a character outside the vocabulary is an error naming it and `what`.
  Tensor encode(const std::string& text, const std::string& what) const;
  std::string decode(const std::vector<int64_t>& tokens) const;

 private:
  std::vector<std::string> chars_;  // token -> the character's UTF-8 bytes
  std::vector<uint32_t> points_;    // token -> code point, sorted
};

struct TextCorpus {
  std::string name;
  CharVocab vocab;
  Tensor train, val;  // i64 [n] tokens: the first 90% of the text and the last 10%
};

// From the text itself (`source` names it in errors): empty or binary text, or text that is not
// UTF-8, is refused.
TextCorpus make_text_corpus(const std::string& source, const std::string& text);
TextCorpus load_text_file(const std::string& path);
// Debian's `fortunes` package: every fortune file of `dir`, in name order, as one text.
TextCorpus load_fortunes(const std::string& dir = "/usr/share/games/fortunes");

struct TextLoaderOptions {
  int64_t batch = 12, context = 64;
  uint64_t seed = 0;
  int64_t rank = 0, world_size = 1;
};

// Random windows of `context` tokens and the tokens one further on, each drawn from a generator
// seeded by (seed, epoch, its place in the global sequence of windows): the ranks draw different
// windows, any batch can be drawn again on resume, and the global batch is the same on any number
// of ranks. An epoch is as many batches as cover the training text once across the ranks.
class TextLoader : public BatchSource {
 public:
  TextLoader(const Tensor& tokens, const TextLoaderOptions& options);
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t num_batches() const override;
  Batch batch(int64_t index) const override;

 private:
  Tensor tokens_;
  TextLoaderOptions options_;
  int64_t epoch_ = 0;
};

// The fixed validation windows: window w is tokens [w context, (w + 1) context] of `tokens`, at
// most `limit` of them. Refuses a text too short for one window.
int64_t validation_windows(const Tensor& tokens, int64_t context, int64_t limit);
Batch window_batch(const Tensor& tokens, int64_t context, int64_t first, int64_t count);

}  // namespace pac::data
