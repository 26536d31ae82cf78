#include "core/cpu_time.h"

#include <ctime>

namespace pac {

namespace {
double read_clock(clockid_t clock) {
  timespec t{};
  if (clock_gettime(clock, &t) != 0) return 0.0;
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
}  // namespace

double thread_cpu_seconds() { return read_clock(CLOCK_THREAD_CPUTIME_ID); }
double process_cpu_seconds() { return read_clock(CLOCK_PROCESS_CPUTIME_ID); }

}  // namespace pac
