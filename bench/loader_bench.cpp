// bench-loader: images per second of the image-folder loader, reading, decoding and transforming
// a folder's training images into batches as a training run does (RandomResizedCrop and flip,
// or with --eval the resize and centre crop), on --threads worker threads (0: on the calling
// thread, one core). The files are read once first, so the page cache serves them, as it does
// torchvision's peer (bench/peers/torch_loader.py) in bench/run_loader.sh.
// Prints one line: "pactrain threads T images N seconds S images_per_s R".
// Usage: bench-loader DIR [--threads T] [--batch B] [--image-size S] [--batches N] [--eval]
//                         [--full-decode]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "apps/data/image_folder.h"
#include "apps/data/image_folder_loader.h"
#include "apps/data/prefetch.h"
#include "apps/file_io.h"
#include "core/error.h"

using namespace pac;

int main(int argc, char** argv) {
  try {
    PAC_CHECK(argc >= 2,
              "usage: bench-loader DIR [--threads T] [--batch B] [--image-size S] "
              "[--batches N] [--eval] [--full-decode]");
    const std::string dir = argv[1];
    int threads = 0;
    int64_t batches = 8;
    data::ImageFolderLoaderOptions options;
    options.batch = 64;
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      auto next = [&] {
        PAC_CHECK(i + 1 < argc, "{} needs a value", arg);
        return std::stoll(argv[++i]);
      };
      if (arg == "--threads") {
        threads = static_cast<int>(next());
      } else if (arg == "--batch") {
        options.batch = next();
      } else if (arg == "--image-size") {
        options.image_size = next();
      } else if (arg == "--batches") {
        batches = next();
      } else if (arg == "--eval") {
        options.train = false;
      } else if (arg == "--full-decode") {
        options.reduced_decode = false;
      } else {
        PAC_FAIL("bench-loader: unknown option {}", arg);
      }
    }
    const data::ImageFolder folder = data::scan_image_folder(dir);
    for (const auto& f : folder.train) read_file_bytes(f.path, uint64_t{1} << 28);  // warm cache
    data::Prefetcher loader(std::make_unique<data::ImageFolderLoader>(folder.train, options),
                            threads, std::max(2, threads));
    PAC_CHECK(loader.num_batches() > batches,
              "{} has {} batches of {}; --batches {} needs one more for the warm-up", dir,
              loader.num_batches(), options.batch, batches);
    loader.batch(0);  // warm-up: threads started, buffers allocated
    const auto start = std::chrono::steady_clock::now();
    for (int64_t b = 1; b <= batches; ++b) loader.batch(b);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t images = batches * options.batch;
    std::printf("pactrain threads %d images %ld seconds %.3f images_per_s %.1f\n", threads,
                static_cast<long>(images), seconds, static_cast<double>(images) / seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-loader: %s\n", e.what());
    return 1;
  }
  return 0;
}
