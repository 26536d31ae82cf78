#include "core/memory_stats.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>

namespace pac {

namespace {
thread_local MemoryTag thread_tag = MemoryTag::other;

double mb(size_t bytes) { return static_cast<double>(bytes) / 1e6; }
}  // namespace

const char* memory_tag_name(MemoryTag tag) {
  // In the order of the enum.
  static constexpr const char* names[kMemoryTags] = {
      "other",     "data",      "weights",    "masks",   "activations", "backward",
      "gradients", "optimizer", "compressor", "pruning", "evaluation"};
  return names[static_cast<int>(tag)];
}

MemoryTag current_memory_tag() { return thread_tag; }

MemoryTagScope::MemoryTagScope(MemoryTag tag) : previous_(thread_tag) { thread_tag = tag; }
MemoryTagScope::~MemoryTagScope() { thread_tag = previous_; }

void AllocatorStats::on_allocate(size_t cls, MemoryTag tag, bool from_cache) {
  ++allocations;
  if (from_cache) {
    ++cache_hits;
    cached_bytes -= cls;
  }
  current_bytes += cls;
  peak_bytes = std::max(peak_bytes, current_bytes);
  size_t& of_tag = tag_bytes[static_cast<int>(tag)];
  of_tag += cls;
  size_t& tag_peak = tag_peak_bytes[static_cast<int>(tag)];
  tag_peak = std::max(tag_peak, of_tag);
  if (current_bytes + cached_bytes > held_peak_bytes) {
    held_peak_bytes = current_bytes + cached_bytes;
    tag_bytes_at_peak = tag_bytes;
    cached_bytes_at_peak = cached_bytes;
  }
}

void AllocatorStats::on_free(size_t cls, MemoryTag tag, bool kept_in_cache) {
  current_bytes -= cls;
  tag_bytes[static_cast<int>(tag)] -= cls;
  if (kept_in_cache) cached_bytes += cls;
}

void AllocatorStats::on_release(size_t cls) { cached_bytes -= cls; }

void AllocatorStats::reset_peaks() {
  peak_bytes = current_bytes;
  held_peak_bytes = current_bytes + cached_bytes;
  tag_peak_bytes = tag_bytes;
  tag_bytes_at_peak = tag_bytes;
  cached_bytes_at_peak = cached_bytes;
}

std::string memory_report(const AllocatorStats& stats, const std::string& title) {
  std::string out =
      fmt::format("{:<14} {:>10} {:>10} {:>14}\n", title, "now MB", "peak MB", "at the peak MB");
  for (int t = 0; t < kMemoryTags; ++t) {
    if (stats.tag_peak_bytes[t] == 0) continue;
    out += fmt::format("{:<14} {:>10.1f} {:>10.1f} {:>14.1f}\n",
                       memory_tag_name(static_cast<MemoryTag>(t)), mb(stats.tag_bytes[t]),
                       mb(stats.tag_peak_bytes[t]), mb(stats.tag_bytes_at_peak[t]));
  }
  out += fmt::format("{:<14} {:>10.1f} {:>10} {:>14.1f}\n", "cached (free)", mb(stats.cached_bytes),
                     "", mb(stats.cached_bytes_at_peak));
  out += fmt::format("{:<14} {:>10.1f} {:>10.1f} {:>14.1f}\n", "held",
                     mb(stats.current_bytes + stats.cached_bytes), mb(stats.held_peak_bytes),
                     mb(stats.held_peak_bytes));
  return out;
}

size_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

}  // namespace pac
