// bench-allreduce: the testbed's calibration. Times a fp32 all-reduce between the ranks (best of
// a few) and prints the bandwidth the link achieved against the rate it was configured with, so
// every results table can say what link it ran on. A ring all-reduce of S bytes over P ranks
// sends 2(P-1)/P S bytes per rank; on the shared testbed all ranks' traffic goes through one
// shaped loopback, on the hosts testbed through each rank's own link.
// Usage: bench-allreduce [--rate RATE] [--mb MEGABYTES] [--repeats N]   (under mpiexec)
// --mb: the all-reduce's size; by default about 16 seconds of RATE, 2 to 32 MB.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/process_group.h"

using namespace pac;

namespace {

// "100mbit", "1gbit", ... in bits per second (tc's units are powers of 1000); 0 for unlimited.
double parse_rate(const std::string& rate) {
  if (rate == "unlimited") return 0.0;
  size_t unit = rate.find_first_not_of("0123456789.");
  PAC_CHECK(unit != std::string::npos && unit > 0, "--rate '{}' is not like 100mbit", rate);
  double value = std::stod(rate.substr(0, unit));
  std::string suffix = rate.substr(unit);
  double scale = suffix == "bit"    ? 1.0
                 : suffix == "kbit" ? 1e3
                 : suffix == "mbit" ? 1e6
                 : suffix == "gbit" ? 1e9
                 : suffix == "tbit" ? 1e12
                                    : -1.0;
  PAC_CHECK(scale > 0, "--rate '{}': unit '{}' is not bit, kbit, mbit, gbit or tbit", rate, suffix);
  return value * scale;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string rate_text = "unlimited";
  double megabytes = 0.0;  // 0: sized to the rate, below
  int repeats = 2;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    PAC_CHECK(i + 1 < argc, "option {} needs a value", arg);
    std::string value = argv[++i];
    if (arg == "--rate")
      rate_text = value;
    else if (arg == "--mb")
      megabytes = std::stod(value);
    else if (arg == "--repeats")
      repeats = std::stoi(value);
    else
      PAC_FAIL("unknown option '{}'; expected --rate, --mb or --repeats", arg);
  }
  PAC_CHECK(megabytes >= 0 && repeats > 0,
            "--mb must not be negative (0: sized to the rate) and --repeats must be positive");
  const double rate = parse_rate(rate_text);
  // By default about 16 seconds of the configured rate, between 2 MB and 32 MB: a slow link is
  // not measured for minutes (32 MB took 4.5 minutes at 1 Mbit/s), and a fast one fills its
  // TCP buffers many times. At 1 Mbit/s 2 MB measured what 32 MB did (0.94x the rate), 1 MB 0.84x.
  if (megabytes == 0.0)
    megabytes = rate > 0 ? std::clamp(rate / 8.0 * 16.0 / 1e6, 2.0, 32.0) : 32.0;
  comm::ProcessGroupPtr group = comm::make_process_group("auto");
  const int world = group->size();
  PAC_CHECK(world > 1, "bench-allreduce needs at least 2 ranks (run it under mpiexec)");
  const int64_t n = static_cast<int64_t>(megabytes * 1e6 / 4);
  Tensor t = Tensor::full({n}, 1.0f);
  group->all_reduce(t, comm::ReduceOp::sum)->wait();  // connections, buffers
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    group->barrier();
    auto start = std::chrono::steady_clock::now();
    group->all_reduce(t, comm::ReduceOp::sum)->wait();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (group->rank() == 0) {
    const char* mode = std::getenv("TESTBED_MODE");
    bool shared = !mode || std::string(mode) != "hosts";
    double bytes = static_cast<double>(n) * 4.0;
    double per_rank = 2.0 * (world - 1) / world * bytes;  // what each rank sends
    double through_link = shared ? per_rank * world : per_rank;
    double achieved = through_link * 8.0 / best;
    std::printf(
        "calibration: %d ranks, %.0f MB fp32 all-reduce in %.3f s; %s link carried %.1f Mbit/s "
        "(configured %s%s)\n",
        world, bytes / 1e6, best, shared ? "the shared" : "each rank's", achieved / 1e6,
        rate_text.c_str(), rate > 0 ? fmt::format(": {:.2f}x", achieved / rate).c_str() : "");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench-allreduce: %s\n", e.what());
  return 1;
}
