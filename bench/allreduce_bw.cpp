// bench-allreduce: the testbed's calibration. Times a fp32 all-reduce between the ranks (best of
// a few) and prints the bandwidth the link achieved against the rate it was configured with, so
// every results table can say what link it ran on. A ring all-reduce of S bytes over P ranks
// sends 2(P-1)/P S bytes per rank; on the shared testbed all ranks' traffic goes through one
// shaped loopback, on the hosts testbed through each rank's own link.
// Usage: bench-allreduce [--rate RATE] [--mb MEGABYTES] [--repeats N]   (under mpiexec)
//        bench-allreduce --sizes 4,256,4k,64k [--algorithms ring,doubling,mpi] [--repeats N]
// --mb: the all-reduce's size; by default about 16 seconds of RATE, 2 to 32 MB.
// --sizes: instead, a table of all-reduces of these sizes in bytes (k: 1000) with each algorithm
// (comm/process_group.h): the median time of N (default 9), the exchanges and the bytes one rank
// made, from which the switch point between recursive doubling and the ring is read. `mpi` is
// the MPI library's own MPI_Iallreduce, whose exchanges and bytes are not counted (shown as 0).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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

// "4,256,4k,64k" in bytes (k: 1000, m: 1000000).
std::vector<int64_t> parse_sizes(const std::string& list) {
  std::vector<int64_t> sizes;
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(at, end - at);
    double scale = 1;
    if (!item.empty() && (item.back() == 'k' || item.back() == 'm')) {
      scale = item.back() == 'k' ? 1e3 : 1e6;
      item.pop_back();
    }
    size_t used = 0;
    double value = 0;
    try {
      value = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PAC_CHECK(used == item.size() && used > 0 && value * scale >= 4,
              "--sizes: '{}' is not a size in bytes of at least 4 (like 4, 256, 4k, 1m)",
              list.substr(at, end - at));
    sizes.push_back(static_cast<int64_t>(value * scale));
    at = end + 1;
  }
  return sizes;
}

// One row per size and algorithm: the median time, and this rank's exchanges and bytes per call.
void size_table(comm::ProcessGroup& group, const std::vector<int64_t>& sizes,
                const std::vector<std::string>& algorithms, int repeats) {
  if (group.rank() == 0)
    std::printf("%10s  %-9s %12s %10s %12s\n", "bytes", "algorithm", "median_ms", "exchanges",
                "bytes_sent");
  for (int64_t size : sizes) {
    for (const std::string& name : algorithms) {
      group.set_all_reduce_algorithm(name == "ring"       ? comm::AllReduceAlgorithm::ring
                                     : name == "doubling" ? comm::AllReduceAlgorithm::doubling
                                                          : comm::AllReduceAlgorithm::mpi);
      Tensor t = Tensor::full({std::max<int64_t>(1, size / 4)}, 1.0f);
      group.all_reduce(t, comm::ReduceOp::sum)->wait();  // warm-up
      std::vector<double> times;
      const uint64_t exchanges = group.exchanges(), bytes = group.bytes_sent();
      for (int r = 0; r < repeats; ++r) {
        group.barrier();
        auto start = std::chrono::steady_clock::now();
        group.all_reduce(t, comm::ReduceOp::sum)->wait();
        times.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(times.begin(), times.end());
      if (group.rank() == 0)
        std::printf("%10ld  %-9s %12.3f %10.1f %12.1f\n", static_cast<long>(t.nbytes()),
                    name.c_str(), 1e3 * times[times.size() / 2],
                    double(group.exchanges() - exchanges) / repeats,
                    double(group.bytes_sent() - bytes) / repeats);
    }
  }
  group.set_all_reduce_algorithm(comm::AllReduceAlgorithm::automatic);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string rate_text = "unlimited";
  double megabytes = 0.0;  // 0: sized to the rate, below
  int repeats = 0;         // 0: 2 for the bandwidth, 9 for a table
  std::string sizes, algorithms = "ring,doubling";
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
    else if (arg == "--sizes")
      sizes = value;
    else if (arg == "--algorithms")
      algorithms = value;
    else
      PAC_FAIL("unknown option '{}'; expected --rate, --mb, --repeats, --sizes or --algorithms",
               arg);
  }
  if (repeats == 0) repeats = sizes.empty() ? 2 : 9;
  PAC_CHECK(megabytes >= 0 && repeats > 0,
            "--mb must not be negative (0: sized to the rate) and --repeats must be positive");
  std::vector<std::string> algorithm_names;
  for (size_t at = 0; at <= algorithms.size();) {
    size_t end = std::min(algorithms.find(',', at), algorithms.size());
    algorithm_names.push_back(algorithms.substr(at, end - at));
    PAC_CHECK(algorithm_names.back() == "ring" || algorithm_names.back() == "doubling" ||
                  algorithm_names.back() == "mpi",
              "--algorithms: '{}' is not ring, doubling or mpi", algorithm_names.back());
    at = end + 1;
  }
  const double rate = parse_rate(rate_text);
  // By default about 16 seconds of the configured rate, between 2 MB and 32 MB: a slow link is
  // not measured for minutes (32 MB took 4.5 minutes at 1 Mbit/s), and a fast one fills its
  // TCP buffers many times. At 1 Mbit/s 2 MB measured what 32 MB did (0.94x the rate), 1 MB 0.84x.
  if (megabytes == 0.0)
    megabytes = rate > 0 ? std::clamp(rate / 8.0 * 16.0 / 1e6, 2.0, 32.0) : 32.0;
  comm::ProcessGroupPtr group = comm::make_process_group("auto");
  const int world = group->size();
  PAC_CHECK(world > 1, "bench-allreduce needs at least 2 ranks (run it under mpiexec)");
  if (!sizes.empty()) {
    size_table(*group, parse_sizes(sizes), algorithm_names, repeats);
    return 0;
  }
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
