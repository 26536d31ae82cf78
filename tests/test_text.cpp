// Text data for language models: the character vocabulary, the 90/10 split, the training windows
// and the fixed validation windows, and the errors a user meets with a wrong file or prompt.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "apps/data/text.h"
#include "core/error.h"

using namespace pac;
using doctest::Contains;

namespace {

std::vector<int64_t> values(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

}  // namespace

TEST_CASE("the vocabulary is the text's characters in code-point order, UTF-8 included") {
  const std::string text = "héllo wörld, 5 € for the héllo\n";
  data::CharVocab vocab = data::CharVocab::of_text(text, "t");
  CHECK(vocab.chars() == "\n ,5defhlortwé\xC3\xB6\xE2\x82\xAC");  // é, ö, then €
  CHECK(vocab.size() == 16);
  Tensor tokens = vocab.encode(text, "t");
  CHECK(tokens.numel() == 31);  // characters, not bytes
  CHECK(vocab.decode(values(tokens)) == text);
  CHECK(data::CharVocab(vocab.chars()).chars() == vocab.chars());  // a checkpoint's round trip
  CHECK_THROWS_WITH_AS(vocab.encode("hello!", "--prompt"),
                       Contains("--prompt: the character U+0021 at byte 5 is not in the model's "
                                "vocabulary of 16 characters"),
                       Error);
  CHECK_THROWS_WITH_AS(vocab.decode({16}), Contains("token 16 is outside the vocabulary"), Error);
}

TEST_CASE("empty, binary and non-UTF-8 text is refused with where and what") {
  CHECK_THROWS_WITH_AS(data::make_text_corpus("a.txt", ""), Contains("a.txt: the text is empty"),
                       Error);
  CHECK_THROWS_WITH_AS(data::make_text_corpus("b.bin", std::string("abc\0def", 7)),
                       Contains("b.bin: a NUL byte at offset 3: this looks like a binary file"),
                       Error);
  CHECK_THROWS_WITH_AS(data::make_text_corpus("c.txt",
                                              "ab\xff"
                                              "cd"),
                       Contains("c.txt: byte 0xff at offset 2 does not start a UTF-8 character"),
                       Error);
  CHECK_THROWS_WITH_AS(data::make_text_corpus("d.txt", "ab\xC3(cd"),
                       Contains("d.txt: byte 0x28 at offset 3 breaks a UTF-8 character"), Error);
  CHECK_THROWS_WITH_AS(data::make_text_corpus("e.txt", "abc"), Contains("too few to split"), Error);
  const std::string missing = "/nonexistent/pactrain-text.txt";
  CHECK_THROWS_AS(data::load_text_file(missing), Error);
  CHECK_THROWS_WITH_AS(data::load_fortunes("/nonexistent"),
                       Contains("install Debian's fortunes package"), Error);
}

TEST_CASE("the split is 90/10 in order, and a file loads as its text") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  auto path = std::filesystem::temp_directory_path() / "pactrain-text-split.txt";
  std::ofstream(path) << text;
  data::TextCorpus corpus = data::load_text_file(path.string());
  std::filesystem::remove(path);
  CHECK(corpus.train.numel() == 90);
  CHECK(corpus.val.numel() == 10);
  CHECK(corpus.vocab.decode(values(corpus.train)) == text.substr(0, 90));
  CHECK(corpus.vocab.decode(values(corpus.val)) == text.substr(90));
}

TEST_CASE("training windows: targets are the next characters; each rank its own stream") {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  data::TextCorpus corpus = data::make_text_corpus("t", text);
  data::TextLoader rank0(corpus.train, {4, 16, 5, 0, 2});
  data::TextLoader rank1(corpus.train, {4, 16, 5, 1, 2});
  CHECK(rank0.num_batches() == 1800 / (4 * 16 * 2));
  data::Batch a = rank0.batch(3);
  CHECK(a.inputs.shape() == Shape{4, 16});
  // Every target row is its input row moved on by one character of the training text.
  std::vector<int64_t> train = values(corpus.train), in = values(a.inputs), out = values(a.targets);
  for (int64_t row = 0; row < 4; ++row) {
    auto start =
        std::search(train.begin(), train.end(), in.begin() + row * 16, in.begin() + (row + 1) * 16);
    REQUIRE(start != train.end());
    CHECK(std::equal(out.begin() + row * 16, out.begin() + (row + 1) * 16, start + 1));
  }
  CHECK(values(rank0.batch(3).inputs) == in);  // drawn again on resume
  CHECK(values(rank1.batch(3).inputs) != in);
  rank0.set_epoch(1);
  CHECK(values(rank0.batch(3).inputs) != in);
  CHECK_THROWS_WITH_AS(data::TextLoader(corpus.train, {4, 1800, 5, 0, 1}),
                       Contains("too few for a context of 1800"), Error);
}

TEST_CASE("a global batch of windows is the same on 1, 2 or 4 ranks") {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += static_cast<char>('a' + (i * 11) % 26);
  data::TextCorpus corpus = data::make_text_corpus("t", text);
  const int64_t global = 8;
  auto global_batch = [&](int64_t ranks, int64_t i) {
    std::vector<std::vector<int64_t>> rows(global);
    for (int64_t r = 0; r < ranks; ++r) {
      data::TextLoader loader(corpus.train, {global / ranks, 16, 5, r, ranks});
      loader.set_epoch(2);
      const std::vector<int64_t> in = values(loader.batch(i).inputs);
      for (int64_t j = 0; j < global / ranks; ++j)
        rows[j * ranks + r].assign(in.begin() + j * 16, in.begin() + (j + 1) * 16);
    }
    return rows;
  };
  const auto one = global_batch(1, 3);
  CHECK(global_batch(2, 3) == one);
  CHECK(global_batch(4, 3) == one);
  CHECK(global_batch(2, 4) != one);
}

TEST_CASE("validation windows are fixed, consecutive and refuse a context beyond the text") {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + i % 26);
  data::TextCorpus corpus = data::make_text_corpus("t", text);  // 100 validation characters
  CHECK(data::validation_windows(corpus.val, 16, 0) == 6);      // (100 - 1) / 16
  CHECK(data::validation_windows(corpus.val, 16, 4) == 4);
  data::Batch b = data::window_batch(corpus.val, 16, 1, 2);
  std::vector<int64_t> val = values(corpus.val), in = values(b.inputs), out = values(b.targets);
  CHECK(std::equal(in.begin(), in.end(), val.begin() + 16));
  CHECK(std::equal(out.begin(), out.end(), val.begin() + 17));
  CHECK_THROWS_WITH_AS(data::validation_windows(corpus.val, 100, 0),
                       Contains("the validation text has 100 characters, too few for a context "
                                "of 100"),
                       Error);
}
