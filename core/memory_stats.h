// Where the bytes go: every block the caching allocators hand out carries a MemoryTag, the
// purpose that was current on the allocating thread (set with a MemoryTagScope), and the
// allocators keep their counts by tag. The training app's --memory-report prints them: what each
// purpose holds now, its own high-water mark, and what each held at the moment the process held
// the most.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pac {

enum class MemoryTag : uint8_t {
  other,        // nothing more specific was set
  data,         // data sets and batches
  weights,      // parameters and buffers
  masks,        // pruning masks and kept-index sets
  activations,  // what forward computes and saves for backward
  backward,     // gradients of activations and the dense weight gradients they make
  gradients,    // parameters' gradients (the Reducer's buckets)
  optimizer,    // momentum, moments
  compressor,   // a compressor's residuals, wire buffers, plans
  pruning,      // a pruning event: the criterion's scores, the selection, the model snapshot
  evaluation,   // held-out evaluation
};
inline constexpr int kMemoryTags = static_cast<int>(MemoryTag::evaluation) + 1;

const char* memory_tag_name(MemoryTag tag);

// The tag of this thread's allocations from now until the scope ends (scopes nest).
MemoryTag current_memory_tag();
class MemoryTagScope {
 public:
  explicit MemoryTagScope(MemoryTag tag);
  ~MemoryTagScope();
  MemoryTagScope(const MemoryTagScope&) = delete;
  MemoryTagScope& operator=(const MemoryTagScope&) = delete;

 private:
  MemoryTag previous_;
};

// One allocator's counts, in the size classes it hands out. "Held" is what it has taken from the
// system: live blocks plus freed blocks kept for reuse; it is what the process's resident memory
// follows.
struct AllocatorStats {
  size_t current_bytes = 0;                          // held by live storages
  size_t peak_bytes = 0;                             // the most ever live at once
  size_t cached_bytes = 0;                           // freed, kept for reuse
  size_t held_peak_bytes = 0;                        // the most ever held (live + cached) at once
  size_t allocations = 0;                            // requests served
  size_t cache_hits = 0;                             // requests served from the cache
  std::array<size_t, kMemoryTags> tag_bytes{};       // live, by tag
  std::array<size_t, kMemoryTags> tag_peak_bytes{};  // each tag's own high-water mark
  std::array<size_t, kMemoryTags> tag_bytes_at_peak{};  // live by tag when held_peak was reached
  size_t cached_bytes_at_peak = 0;

  // The allocator's bookkeeping, called under its lock. `cls` is the block's size class.
  void on_allocate(size_t cls, MemoryTag tag, bool from_cache);
  void on_free(size_t cls, MemoryTag tag, bool kept_in_cache);
  void on_release(size_t cls);  // a cached block returned to the system
  // Starts new high-water marks from what is held now (a benchmark's or test's next phase).
  void reset_peaks();
};

// The statistics as a table, one row per tag that ever held anything, in MB.
std::string memory_report(const AllocatorStats& stats, const std::string& title);

// The process's peak resident set size in bytes (getrusage), what `time -f %M` reports.
size_t peak_rss_bytes();

}  // namespace pac
