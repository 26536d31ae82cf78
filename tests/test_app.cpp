// The training app as a library: overfitting a batch, bit-identical resume, checkpoints of
// another model refused, and the safetensors reader against corrupt files.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "apps/checkpoint.h"
#include "apps/safetensors.h"
#include "apps/trainer.h"
#include "core/allocator.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "optim/adamw.h"
#include "optim/sgd.h"

using namespace pac;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("pactrain-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

// Steps until the loss on one fixed batch drops below `target`; -1 if it never does.
int overfit(nn::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y,
            float target, int max_steps) {
  for (int step = 1; step <= max_steps; ++step) {
    Tensor loss = cross_entropy(model(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (loss.item() < target) return step;
  }
  return -1;
}

}  // namespace

TEST_CASE("ResNet-20 and ViT-tiny overfit a batch of 64 images") {
  default_generator().manual_seed(3);
  Generator g(4);
  Tensor x = g.randn({64, 1, 28, 28});
  Tensor y = Tensor::empty({64}, DType::i64);
  for (int64_t i = 0; i < 64; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(g.below(10));

  auto resnet = models::make_model({"resnet20", 1, 10, 28});
  optim::Sgd sgd(resnet->named_parameters(), {0.05f, 0.9f});
  int resnet_steps = overfit(*resnet, sgd, x, y, 0.05f, 80);
  INFO("resnet20 steps: " << resnet_steps);
  CHECK(resnet_steps > 0);

  models::ModelConfig vit{"vit-tiny", 1, 10, 28};
  vit.patch = 7;  // 16 patches + the class token keep the test quick
  auto transformer = models::make_model(vit);
  optim::AdamW adamw(transformer->named_parameters(), {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f});
  int vit_steps = overfit(*transformer, adamw, x, y, 0.05f, 80);
  INFO("vit-tiny steps: " << vit_steps);
  CHECK(vit_steps > 0);
}

namespace {

// Every tensor of two checkpoint files is byte for byte the same.
void check_same_tensors(const std::string& a_path, const std::string& b_path) {
  TensorFile a = load_safetensors(a_path), b = load_safetensors(b_path);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (auto& [name, t] : a.tensors) {
    REQUIRE(b.tensors.count(name));
    const Tensor& u = b.tensors.at(name);
    REQUIRE(u.nbytes() == t.nbytes());
    INFO(name);
    CHECK(std::memcmp(t.raw_data(), u.raw_data(), t.nbytes()) == 0);
  }
}

// Trains `o` straight through, and again stopped after `stop` steps and resumed; the final
// checkpoints (weights, masks, optimizer, compressor and pruner state) must be identical.
void check_resume_is_exact(TrainOptions o, int64_t stop) {
  std::string straight = temp_path("straight.safetensors");
  std::string half = temp_path("half.safetensors");
  std::string resumed = temp_path("resumed.safetensors");
  o.checkpoint = straight;
  int64_t steps = train(o).steps;
  o.checkpoint = half;
  o.max_steps = stop;
  CHECK(train(o).steps == stop);
  o.checkpoint = resumed;
  o.resume = half;
  o.max_steps = 0;
  CHECK(train(o).steps == steps);
  check_same_tensors(straight, resumed);
  for (const auto& p : {straight, half, resumed}) fs::remove(p);
}

TrainOptions small_run() {
  TrainOptions o;
  o.model = {"resnet20", 1, 0, 12};
  o.data = "synthetic";
  o.synthetic_size = 96;
  o.batch = 16;
  o.epochs = 2;  // 6 steps per epoch
  o.lr = 0.05f;
  o.threads = 1;
  o.quiet = true;
  o.seed = 5;
  return o;
}

}  // namespace

TEST_CASE("resuming restores the compressor's state: residuals, factors, counters") {
  struct Case {
    std::string compress;
    comm::CompressorOptions options;
  };
  for (const Case& c : std::vector<Case>{{"topk", {{"ratio", "0.05"}, {"momentum", "0.5"}}},
                                         {"randomk", {{"ratio", "0.1"}}},
                                         {"terngrad", {}},
                                         {"signsgd", {}},
                                         {"powersgd", {{"start_iter", "2"}}}}) {
    INFO(c.compress);
    TrainOptions o = small_run();
    o.compress = c.compress;
    o.compress_options = c.options;
    check_resume_is_exact(o, 7);
  }
}

TEST_CASE("mixed-precision runs resume bit-identically, fp16's loss scale with them") {
  TrainOptions o = small_run();
  o.precision = "bf16";
  check_resume_is_exact(o, 7);
  o.precision = "fp16";
  o.loss_scale = 1024.0f;
  o.loss_scale_growth_interval = 3;  // the scale grows in the run, so a lost state would show
  check_resume_is_exact(o, 7);
  const std::string path = temp_path("fp16.safetensors");
  o.checkpoint = path;
  CHECK(train(o).steps == 12);
  TensorFile file = load_safetensors(path);
  REQUIRE(file.tensors.count("grad_scaler.scale"));
  CHECK(file.tensors.at("grad_scaler.scale").item() == 1024.0f * 16.0f);  // 12 steps / 3
  fs::remove(path);

  o.checkpoint.clear();
  o.sync = "local:4";  // each rank would back off on its own
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("--precision fp16 needs --sync step"), Error);
  o.sync = "step";
  o.precision = "bf16";  // loss scaling is fp16's only
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("apply to --precision fp16 only"), Error);
  o.loss_scale = 65536.0f;
  o.loss_scale_growth_interval = 2000;
  o.device = "cuda";  // no GPU kernels yet: refused before any GPU is touched
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("CPU reference path only"), Error);
}

TEST_CASE("--packed-wire fields is refused where no MPI group sends the sums") {
  TrainOptions o = small_run();
  o.packed_wire = "fields";  // one process: the local group sends nothing
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("only the mpi backend"), Error);
}

TEST_CASE("resuming a pruned run restores masks, criterion sums and the ternary residuals") {
  TrainOptions o = small_run();
  o.prune = "taylor";
  o.sparsity = 0.8;
  o.prune_schedule = "gradual:2:10:2";
  o.compress = "pactrain";
  o.compress_options = {{"enc", "ternary"}, {"ef", "1"}};
  SUBCASE("stopped between pruning events, with taylor sums pending") {
    check_resume_is_exact(o, 5);
  }
  SUBCASE("stopped just before a pruning event") { check_resume_is_exact(o, 6); }
  SUBCASE("imp: a run with weight rewinding resumes too") {
    o.prune = "magnitude";
    o.prune_schedule = "imp:2:1";
    o.compress_options = {{"enc", "fp32"}};
    check_resume_is_exact(o, 4);
  }
}

TEST_CASE(
    "topk's momentum correction with SGD's momentum trains as dense momentum SGD when it sends "
    "everything: the compressor moves the gradient, the optimizer only the weight decay") {
  // Sending every value (ratio 1) with no factor masking, what topk sends is the momentum
  // buffer of the gradient; SGD adds the momentum buffer of the weight decay. Together that is
  // dense momentum SGD's buffer of gradient plus weight decay. Were the gradient given momentum
  // twice (or the weight decay none), the weights would part at once.
  // Three steps: the two runs round differently (the buffers add up in another order), and a
  // longer run lets some activation cross a ReLU's kink in one run and not the other, after which
  // they part by more than rounding (by 4% of a bias after six steps in the sanitizer build).
  TrainOptions o = small_run();
  o.max_steps = 3;
  o.weight_decay = 0.05f;
  o.lr = 0.02f;
  std::string dense_path = temp_path("dense.safetensors"),
              topk_path = temp_path("topk.safetensors");
  o.checkpoint = dense_path;
  train(o);
  o.compress = "topk";
  o.compress_options = {{"ratio", "1"}, {"momentum", "0.9"}, {"masking", "0"}};
  o.checkpoint = topk_path;
  train(o);
  TensorFile dense = load_safetensors(dense_path), topk = load_safetensors(topk_path);
  int compared = 0;
  for (const auto& [name, t] : dense.tensors) {
    if (name.rfind("optimizer.", 0) == 0 || name.rfind("compressor.", 0) == 0 ||
        t.dtype() != DType::f32 || !topk.tensors.count(name)) {
      continue;
    }
    INFO(name);
    std::vector<float> want = t.to_vector(), got = topk.tensors.at(name).to_vector();
    REQUIRE(got.size() == want.size());
    double worst = 0.0, scale = 1e-12;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    }
    CHECK(worst / scale <= 1e-4);
    ++compared;
  }
  CHECK(compared > 20);  // every weight and norm parameter of the ResNet-20
  for (const auto& path : {dense_path, topk_path}) fs::remove(path);
}

TEST_CASE("a checkpoint resumes only with the compressor and criterion it was trained with") {
  TrainOptions o = small_run();
  o.compress = "topk";
  o.max_steps = 3;
  std::string path = temp_path("topk.safetensors");
  o.checkpoint = path;
  train(o);
  o.resume = path;
  o.compress = "randomk";
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("trained with --compress topk"), Error);
  o.compress = "topk";
  o.prune = "magnitude";
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("trained with no --prune"), Error);
  fs::remove(path);
}

TEST_CASE("options of one optimizer given to the other are refused, not ignored") {
  TrainOptions o = small_run();
  o.max_steps = 1;
  o.optimizer = "adamw";
  o.momentum = 0.5f;
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("--momentum and --nesterov apply to"), Error);
  o.momentum = 0.9f;
  o.nesterov = true;
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("--momentum and --nesterov apply to"), Error);
  o = small_run();
  o.max_steps = 1;
  o.beta2 = 0.99f;
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("apply to --optimizer adamw, not sgd"), Error);
}

TEST_CASE("a model configuration out of range is refused before the model is built") {
  std::string path = temp_path("huge-model.safetensors");
  models::ModelConfig config{"vit", 1, 10, 28};
  config.depth = 1000000000;
  TensorFile file;
  file.metadata = {{"format", "pactrain-checkpoint-2"}, {"model", model_config_json(config)}};
  save_safetensors(path, file);
  CHECK_THROWS_WITH_AS(read_checkpoint_config(path),
                       doctest::Contains("has depth = 1000000000, expected 0 to 1024"), Error);
  std::string json = model_config_json(models::ModelConfig{"vit", 1, 10, 28});
  json.replace(json.find("\"depth\":0"), 9, "\"depth\":1e30");
  file.metadata["model"] = json;
  save_safetensors(path, file);
  CHECK_THROWS_WITH_AS(read_checkpoint_config(path), doctest::Contains("depth is not an integer"),
                       Error);
  fs::remove(path);
}

TEST_CASE("a resumed run continues bit-identically") {
  TrainOptions o;
  o.model = {"resnet20", 0, 0, 0};
  o.data = "synthetic";
  o.synthetic_size = 96;
  o.model.in_channels = 1;
  o.model.image_size = 12;
  o.batch = 16;
  o.epochs = 2;  // 6 steps per epoch: the resume point crosses an epoch boundary
  o.lr = 0.05f;
  o.nesterov = true;
  o.crop_padding = 2;
  o.flip = true;
  o.threads = 1;
  o.quiet = true;
  o.seed = 11;

  std::string straight = temp_path("straight.safetensors");
  std::string half = temp_path("half.safetensors");
  std::string resumed = temp_path("resumed.safetensors");
  o.checkpoint = straight;
  CHECK(train(o).steps == 12);

  o.checkpoint = half;
  o.max_steps = 8;
  CHECK(train(o).steps == 8);
  o.checkpoint = resumed;
  o.resume = half;
  o.max_steps = 0;
  CHECK(train(o).steps == 12);

  check_same_tensors(straight, resumed);

  // A checkpoint of another model is refused by name.
  o.model.name = "resnet32";
  o.resume = half;
  CHECK_THROWS_WITH_AS(train(o), doctest::Contains("checkpoint is of another model"), Error);
  for (const auto& p : {straight, half, resumed}) fs::remove(p);
}

TEST_CASE("a zero-element tensor after others round-trips through a checkpoint") {
  // pactrain's residual of a bucket whose weights are all pruned is such a tensor.
  std::string path = temp_path("empty-tensor.safetensors");
  TensorFile f;
  f.tensors["a"] = Tensor::from_vector({1, 2, 3}, {3});
  f.tensors["b"] = Tensor::empty({0});
  f.tensors["c"] = Tensor::from_vector({4}, {1});
  save_safetensors(path, f);
  TensorFile g = load_safetensors(path);
  CHECK(g.tensors.at("b").numel() == 0);
  CHECK(g.tensors.at("c").to_vector() == std::vector<float>{4});
  fs::remove(path);
}

TEST_CASE("a crafted header of overlapping tensors is refused before their memory is allocated") {
  // 200 entries that each claim the whole 1 MB data section would need 200 MB if each were
  // allocated before the extents are checked against each other.
  const uint64_t data_bytes = 1 << 20;
  std::string header = "{";
  for (int i = 0; i < 200; ++i) {
    header += fmt::format("{}\"t{}\":{{\"dtype\":\"U8\",\"shape\":[{}],\"data_offsets\":[0,{}]}}",
                          i ? "," : "", i, data_bytes, data_bytes);
  }
  header += "}";
  std::vector<uint8_t> bytes(8 + header.size() + data_bytes, 0);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  cpu_reset_peak_stats();
  const size_t before = cpu_allocator_stats().current_bytes;
  CHECK_THROWS_WITH_AS(parse_safetensors(bytes.data(), bytes.size(), "crafted.safetensors"),
                       doctest::Contains("overlapping tensors"), Error);
  CHECK(cpu_allocator_stats().peak_bytes - before <= 2 * data_bytes);
}

TEST_CASE("safetensors round trip with masks and metadata; no temporary file left") {
  std::string path = temp_path("roundtrip.safetensors");
  TensorFile f;
  f.tensors["w"] = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  f.tensors["w.mask"] = Tensor::from_vector({1, 0, 1, 1, 0, 1}, {2, 3}).to(DType::u8);
  f.tensors["idx"] = Tensor::from_indices({7, 8}, {2});
  f.metadata["note"] = "hello";
  save_safetensors(path, f);
  TensorFile g = load_safetensors(path);
  CHECK(g.metadata.at("note") == "hello");
  CHECK(g.tensors.at("w").to_vector() == f.tensors.at("w").to_vector());
  CHECK(g.tensors.at("w.mask").dtype() == DType::u8);
  CHECK(g.tensors.at("idx").to_vector() == std::vector<float>{7, 8});
  for (auto& entry : fs::directory_iterator(fs::path(path).parent_path())) {
    CHECK(entry.path().string().find(fs::path(path).filename().string() + ".tmp") ==
          std::string::npos);
  }
  fs::remove(path);
}

TEST_CASE("corrupt safetensors files are refused with the problem named") {
  std::string path = temp_path("corrupt.safetensors");
  auto write_raw = [&](const std::string& header, size_t data_bytes, uint64_t declared = 0) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    uint64_t n = declared ? declared : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << std::string(data_bytes, '\0');
  };
  write_raw("{}", 0, 1000);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("does not fit"), Error);
  write_raw("{not json", 0);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("not valid JSON"), Error);
  write_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("outside the 4 data bytes"),
                       Error);
  write_raw(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("needs 12 bytes"), Error);
  write_raw(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("dtype 'Q4'"), Error);
  write_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("trailing data"), Error);
  // A shape whose element count overflows 64 bits must not wrap to a size that matches.
  write_raw(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("too large for any file"), Error);
  // Two tensors on the same bytes, with the count of bytes still matching the data section.
  write_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
            16);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("overlapping tensors or a gap"),
                       Error);
  write_raw(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("not an integer"), Error);
  // Found by the checkpoint fuzzer: a float offset must be refused, not converted.
  write_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,1e24]}})", 8);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("not a non-negative integer"),
                       Error);
  write_raw(R"({"a":[1,2]})", 0);
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("must be an object"), Error);
  write_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  CHECK_NOTHROW(load_safetensors(path));
  CHECK_THROWS_WITH_AS(read_checkpoint_config(path), doctest::Contains("not a pactrain checkpoint"),
                       Error);
  std::ofstream(path, std::ios::trunc) << "abc";
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("too short"), Error);

  // One flipped byte in the data of a file this program wrote is caught by its CRC-32.
  TensorFile file;
  file.tensors["w"] = Tensor::from_vector({1, 2, 3, 4}, {4});
  save_safetensors(path, file);
  CHECK(load_safetensors(path).tensors.at("w").to_vector() == std::vector<float>{1, 2, 3, 4});
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  CHECK_THROWS_WITH_AS(load_safetensors(path), doctest::Contains("the file is damaged"), Error);
  fs::remove(path);
}

TEST_CASE("a GPT run on text resumes bit-identically, pruned, across an epoch boundary") {
  std::string text_path = temp_path("text.txt");
  {
    std::ofstream text(text_path);
    for (int i = 0; i < 300; ++i) text << "line " << i % 13 << ": the quick brown fox.\n";
  }
  TrainOptions o;
  o.model.name = "gpt";
  o.model.dim = 16;
  o.model.depth = 2;
  o.model.heads = 2;
  o.model.context = 16;
  o.data = "text";
  o.text_file = text_path;
  o.batch = 32;
  o.epochs = 2;  // 15 steps per epoch: 7911 training characters / (32 x 16)
  o.optimizer = "adamw";
  o.lr = 3e-3f;
  o.warmup = 3;  // a constant schedule after it: stopping early must not change the rates
  o.decay_1d = false;
  o.eval_every = 5;
  o.eval_iters = 1;
  o.prune = "magnitude";
  o.sparsity = 0.5;
  o.prune_schedule = "gradual:2:16:2";
  o.threads = 1;
  o.quiet = true;
  o.seed = 3;
  TrainResult r = train(o);
  CHECK(r.steps == 30);
  CHECK(r.test.samples == 32 * 16);  // --eval-iters batches of validation windows
  CHECK(r.test.loss < 2.9);          // from ln(25 characters) = 3.2 at the start
  check_resume_is_exact(o, 17);      // after the last pruning event, in the second epoch
  fs::remove(text_path);
}

TEST_CASE("batches made ahead by loader threads train exactly as batches made by the step") {
  TrainOptions o = small_run();
  o.crop_padding = 2;
  o.flip = true;
  o.loader_threads = 0;
  const std::string alone = temp_path("loader-alone.safetensors");
  const std::string ahead = temp_path("loader-ahead.safetensors");
  o.checkpoint = alone;
  train(o);
  o.loader_threads = 3;
  o.checkpoint = ahead;
  train(o);
  check_same_tensors(alone, ahead);
  // And a resume, whose first epoch starts midway, with them.
  check_resume_is_exact(o, 4);
  for (const auto& p : {alone, ahead}) fs::remove(p);
}
