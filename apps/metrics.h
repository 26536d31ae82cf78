// The training run's metrics file (--metrics): one JSON record per line, written by rank 0, and
// the record of where the run's memory went.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/device.h"

namespace pac {

class MetricsWriter {
 public:
  // An empty path writes nothing; `append` continues a resumed run's file.
  MetricsWriter(const std::string& path, bool append);
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
};

// {"kind": "memory", ...}: the process's peak resident set and, for the CPU allocator (and the
// GPU's when `device` is one), its counts by purpose (core/memory_stats.h).
nlohmann::json memory_record(Device device);
// The same as tables, for --memory-report.
std::string memory_report_text(Device device);

}  // namespace pac
