#include "apps/metrics.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/allocator.h"
#include "core/error.h"

namespace pac {

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  PAC_CHECK(out_.good(), "--metrics: cannot open '{}' for writing", path);
  std::error_code ec;
  whole_bytes_ = std::filesystem::file_size(path, ec);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  std::string line = record.dump();
  line += '\n';
  out_ << line;
  out_.flush();
  if (!out_.good()) {
    // A torn last line would break every reader of the file; cut it back to whole records.
    out_.close();
    std::error_code ec;
    std::filesystem::resize_file(path_, whole_bytes_, ec);
    PAC_FAIL(
        "--metrics: writing a record to '{}' failed (disk full?); the file holds the records "
        "before it",
        path_);
  }
  whole_bytes_ += line.size();
}

namespace {

// One allocator's counts by purpose.
nlohmann::json memory_json(const AllocatorStats& s) {
  nlohmann::json now, peak, at_peak;
  for (int t = 0; t < kMemoryTags; ++t) {
    if (s.tag_peak_bytes[t] == 0) continue;
    const char* name = memory_tag_name(static_cast<MemoryTag>(t));
    now[name] = s.tag_bytes[t];
    peak[name] = s.tag_peak_bytes[t];
    at_peak[name] = s.tag_bytes_at_peak[t];
  }
  return {{"held_bytes", s.current_bytes + s.cached_bytes},
          {"held_peak_bytes", s.held_peak_bytes},
          {"live_peak_bytes", s.peak_bytes},
          {"cached_bytes", s.cached_bytes},
          {"cached_bytes_at_peak", s.cached_bytes_at_peak},
          {"now", now},
          {"peak", peak},
          {"at_peak", at_peak}};
}

}  // namespace

nlohmann::json memory_record(Device device) {
  nlohmann::json record{{"kind", "memory"},
                        {"peak_rss_bytes", peak_rss_bytes()},
                        {"cpu", memory_json(cpu_allocator_stats())}};
  if (!device.is_cpu()) record["gpu"] = memory_json(cuda_allocator_stats());
  return record;
}

std::string memory_report_text(Device device) {
  std::string out = memory_report(cpu_allocator_stats(), "host memory");
  if (!device.is_cpu()) {
    out += '\n';
    out += memory_report(cuda_allocator_stats(), "GPU memory");
  }
  return out + fmt::format("process peak resident set: {:.1f} MB\n", peak_rss_bytes() / 1e6);
}

}  // namespace pac
