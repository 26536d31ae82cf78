// Files written all or nothing: a checkpoint or metrics file whose write fails at any point leaves
// the previous file as it was, no temporary behind, and an error that names the file and why.
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "apps/file_io.h"
#include "apps/metrics.h"
#include "apps/safetensors.h"

using namespace pac;
namespace fs = std::filesystem;

namespace {

// A fresh, empty folder of its own, so "no temporary left" can be checked by listing it.
fs::path fresh_folder(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("pactrain-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

size_t files_in(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TensorFile small_file(float value) {
  TensorFile f;
  f.tensors["w"] = Tensor::from_vector(std::vector<float>(1000, value), {1000});
  f.metadata["format"] = "test";
  return f;
}

// Lowers the largest file this process may write, as a full disk or a quota would; the write past
// it fails with EFBIG instead of raising SIGXFSZ.
struct FileSizeLimit {
  rlimit old{};
  void (*old_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old);
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = old;
    lowered.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
};

}  // namespace

TEST_CASE("a checkpoint whose write fails leaves the old file and no temporary") {
  fs::path dir = fresh_folder("write-fails");
  std::string path = (dir / "run.safetensors").string();
  save_safetensors(path, small_file(1.0f));
  {
    FileSizeLimit limit(1024);  // the header fits, the 4 kB tensor does not
    CHECK_THROWS_WITH_AS(save_safetensors(path, small_file(2.0f)),
                         doctest::Contains("writing failed"), Error);
  }
  CHECK(files_in(dir) == 1);
  CHECK(load_safetensors(path).tensors.at("w").to_vector()[0] == 1.0f);
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint whose sync to disk fails is an error; the old file stays") {
  fs::path dir = fresh_folder("sync-fails");
  std::string path = (dir / "run.safetensors").string();
  save_safetensors(path, small_file(1.0f));
  arm_sync_failure();
  CHECK_THROWS_WITH_AS(save_safetensors(path, small_file(2.0f)),
                       doctest::Contains("cannot sync the new file to disk"), Error);
  CHECK(files_in(dir) == 1);
  CHECK(load_safetensors(path).tensors.at("w").to_vector()[0] == 1.0f);
  save_safetensors(path, small_file(3.0f));  // the failure was one sync's; the next save works
  CHECK(load_safetensors(path).tensors.at("w").to_vector()[0] == 3.0f);
  fs::remove_all(dir);
}

TEST_CASE("a file written without commit is removed, and the old one kept") {
  fs::path dir = fresh_folder("no-commit");
  std::string path = (dir / "out.bin").string();
  { std::ofstream(path) << "old"; }
  {
    AtomicFileWriter w(path);
    w.write("new", 3);
    CHECK(fs::exists(w.temporary_path()));
  }  // as when an exception leaves the writer's scope
  CHECK(files_in(dir) == 1);
  std::ifstream in(path);
  std::string text;
  in >> text;
  CHECK(text == "old");
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint in a folder that cannot be written names the folder's error") {
  CHECK_THROWS_WITH_AS(save_safetensors("/proc/pactrain-no-such/run.safetensors", small_file(1)),
                       doctest::Contains("cannot open for writing"), Error);
}

TEST_CASE("a metrics record that cannot be written is an error, not a lost line") {
  fs::path dir = fresh_folder("metrics-fails");
  std::string path = (dir / "metrics.jsonl").string();
  MetricsWriter metrics(path, false);
  metrics.write({{"step", 1}});
  FileSizeLimit limit(fs::file_size(path));  // no room for a second line
  CHECK_THROWS_WITH_AS(metrics.write({{"step", 2}}), doctest::Contains("metrics.jsonl"), Error);
  fs::remove_all(dir);
}
