// The training run's metrics file (--metrics): one JSON record per line, written by rank 0, and
// the record of where the run's memory went.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/device.h"

namespace pac {

class MetricsWriter {
 public:
  // An empty path writes nothing; `append` continues a resumed run's file. A record that cannot
  // be written is an error, and the file is cut back to the records before it.
  MetricsWriter(const std::string& path, bool append);
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream out_;
  uint64_t whole_bytes_ = 0;  // the file's size after its last whole record
};

// {"kind": "memory", ...}: the process's peak resident set and, for the CPU allocator (and the
// GPU's when `device` is one), its counts by purpose (core/memory_stats.h).
nlohmann::json memory_record(Device device);
// The same as tables, for --memory-report.
std::string memory_report_text(Device device);

}  // namespace pac
