#include "apps/data/text.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "apps/data/loader.h"
#include "apps/file_io.h"
#include "core/error.h"
#include "core/generator.h"

namespace pac::data {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxTextBytes = uint64_t{1} << 31;

struct CodePoint {
  uint32_t point;
  size_t at, length;  // its bytes in the text
};

// The code points of UTF-8 `text`; anything that is not UTF-8 (or is a NUL, the mark of a binary
// file) is refused with its offset.
std::vector<CodePoint> code_points(const std::string& text, const std::string& source) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
    const uint8_t lead = byte(at);
    PAC_CHECK(lead != 0,
              "{}: a NUL byte at offset {}: this looks like a binary file, expected "
              "UTF-8 text",
              source, at);
    int length = lead < 0x80           ? 1
                 : (lead >> 5) == 0x6  ? 2
                 : (lead >> 4) == 0xe  ? 3
                 : (lead >> 3) == 0x1e ? 4
                                       : 0;
    PAC_CHECK(length > 0 && at + length <= text.size(),
              "{}: byte 0x{:02x} at offset {} does not start a UTF-8 character; expected UTF-8 "
              "text",
              source, lead, at);
    uint32_t point = length == 1 ? lead : lead & (0x7f >> length);
    for (int k = 1; k < length; ++k) {
      PAC_CHECK((byte(at + k) & 0xc0) == 0x80,
                "{}: byte 0x{:02x} at offset {} breaks a UTF-8 character; expected UTF-8 text",
                source, byte(at + k), at + k);
      point = (point << 6) | (byte(at + k) & 0x3f);
    }
    out.push_back({point, at, static_cast<size_t>(length)});
    at += length;
  }
  return out;
}

}  // namespace

CharVocab::CharVocab(const std::string& chars) {
  for (const CodePoint& c : code_points(chars, "vocabulary")) {
    PAC_CHECK(points_.empty() || c.point > points_.back(),
              "vocabulary: characters must be distinct and in code-point order (at byte {})", c.at);
    points_.push_back(c.point);
    chars_.push_back(chars.substr(c.at, c.length));
  }
}

CharVocab CharVocab::of_text(const std::string& text, const std::string& source) {
  // The first occurrence of each code point, in code-point order.
  std::map<uint32_t, CodePoint> distinct;
  for (const CodePoint& c : code_points(text, source)) distinct.emplace(c.point, c);
  std::string chars;
  for (const auto& [point, c] : distinct) chars += text.substr(c.at, c.length);
  return CharVocab(chars);
}

std::string CharVocab::chars() const {
  std::string out;
  for (const auto& c : chars_) out += c;
  return out;
}

Tensor CharVocab::encode(const std::string& text, const std::string& what) const {
  std::vector<CodePoint> points = code_points(text, what);
  Tensor out = Tensor::empty({static_cast<int64_t>(points.size())}, DType::i64);
  int64_t* tokens = out.data<int64_t>();
  for (size_t i = 0; i < points.size(); ++i) {
    auto it = std::lower_bound(points_.begin(), points_.end(), points[i].point);
    PAC_CHECK(it != points_.end() && *it == points[i].point,
              "{}: the character U+{:04X} at byte {} is not in the model's vocabulary of {} "
              "characters",
              what, points[i].point, points[i].at, size());
    tokens[i] = it - points_.begin();
  }
  return out;
}

std::string CharVocab::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  for (int64_t t : tokens) {
    PAC_CHECK(t >= 0 && t < size(), "decode: token {} is outside the vocabulary [0, {})", t,
              size());
    out += chars_[t];
  }
  return out;
}

TextCorpus make_text_corpus(const std::string& source, const std::string& text) {
  PAC_CHECK(!text.empty(), "{}: the text is empty; expected UTF-8 text", source);
  TextCorpus corpus;
  corpus.name = source;
  corpus.vocab = CharVocab::of_text(text, source);
  Tensor tokens = corpus.vocab.encode(text, source);
  const int64_t n = tokens.numel(), split = n * 9 / 10;
  PAC_CHECK(split >= 2 && n - split >= 2,
            "{}: {} characters are too few to split 90/10 into training and validation text",
            source, n);
  corpus.train = tokens.view_flat(0, {split}).clone();
  corpus.val = tokens.view_flat(split, {n - split}).clone();
  return corpus;
}

TextCorpus load_text_file(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path, kMaxTextBytes);
  return make_text_corpus(path, std::string(bytes.begin(), bytes.end()));
}

TextCorpus load_fortunes(const std::string& dir) {
  PAC_CHECK(fs::is_directory(dir),
            "--data fortunes: no folder '{}'; install Debian's fortunes package "
            "(scripts/setup.sh fortunes) or use --data text --text-file PATH",
            dir);
  // The fortune files are the regular files without an extension (foo.dat is foo's index and
  // foo.u8 a link to it); a fortune ends at a line holding only "%".
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && !entry.is_symlink() && !entry.path().has_extension())
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  PAC_CHECK(!files.empty(), "--data fortunes: no fortune files in '{}'", dir);
  std::string text;
  for (const auto& file : files) {
    std::vector<uint8_t> bytes = read_file_bytes(file.string(), kMaxTextBytes);
    std::string part(bytes.begin(), bytes.end());
    for (size_t at = 0; (at = part.find("\n%\n", at)) != std::string::npos;)
      part.replace(at, 3, "\n\n");
    text += part;
  }
  return make_text_corpus("fortunes", text);
}

TextLoader::TextLoader(const Tensor& tokens, const TextLoaderOptions& options)
    : tokens_(tokens), options_(options) {
  PAC_CHECK(options.batch > 0 && options.context > 0,
            "text loader: batch {} and context {} must be positive", options.batch,
            options.context);
  PAC_CHECK(tokens.numel() > options.context + 1,
            "the training text has {} characters, too few for a context of {}; use a smaller "
            "--context or a longer text",
            tokens.numel(), options.context);
}

int64_t TextLoader::num_batches() const {
  const int64_t per_batch = options_.batch * options_.context * options_.world_size;
  return std::max<int64_t>(1, tokens_.numel() / per_batch);
}

Batch TextLoader::batch(int64_t index) const {
  PAC_CHECK(index >= 0 && index < num_batches(), "text loader: batch {} of {} does not exist",
            index, num_batches());
  const int64_t b = options_.batch, t = options_.context;
  Batch out{Tensor::empty({b, t}, DType::i64), Tensor::empty({b, t}, DType::i64), {}};
  const int64_t* src = tokens_.data<int64_t>();
  const uint64_t starts = static_cast<uint64_t>(tokens_.numel() - t);  // window + 1 fits
  for (int64_t row = 0; row < b; ++row) {
    // Window `row` of this rank's batch is row `rank + row x world` of the global batch; its
    // start depends on that place alone, so a global batch is the same on any number of ranks.
    const int64_t position = (index * b + row) * options_.world_size + options_.rank;
    const int64_t start =
        static_cast<int64_t>(sample_generator(options_.seed, epoch_, position).below(starts));
    out.samples.push_back(start);
    std::copy(src + start, src + start + t, out.inputs.data<int64_t>() + row * t);
    std::copy(src + start + 1, src + start + t + 1, out.targets.data<int64_t>() + row * t);
  }
  return out;
}

int64_t validation_windows(const Tensor& tokens, int64_t context, int64_t limit) {
  const int64_t windows = (tokens.numel() - 1) / context;
  PAC_CHECK(windows > 0,
            "the validation text has {} characters, too few for a context of {}; use a smaller "
            "--context or a longer text",
            tokens.numel(), context);
  return limit > 0 ? std::min(windows, limit) : windows;
}

Batch window_batch(const Tensor& tokens, int64_t context, int64_t first, int64_t count) {
  Batch out{
      Tensor::empty({count, context}, DType::i64), Tensor::empty({count, context}, DType::i64), {}};
  const int64_t* src = tokens.data<int64_t>();
  for (int64_t w = 0; w < count; ++w) {
    const int64_t start = (first + w) * context;
    std::copy(src + start, src + start + context, out.inputs.data<int64_t>() + w * context);
    std::copy(src + start + 1, src + start + context + 1,
              out.targets.data<int64_t>() + w * context);
  }
  return out;
}

}  // namespace pac::data
