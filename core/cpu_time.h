// CPU time, as the kernel counts it: where ranks share cores, what one thread spends is taken
// from the others, so a step's wall time alone does not say who used the processor.
#pragma once

namespace pac {

// Seconds of CPU (user and system) the calling thread has used since it started.
double thread_cpu_seconds();
// Seconds of CPU all of this process's threads have used since it started.
double process_cpu_seconds();

}  // namespace pac
