#include "core/cpu/threads.h"

#include <cblas.h>

#ifdef PAC_WITH_DNNL
#include <omp.h>
#endif

#include "core/error.h"

namespace pac::cpu {

void set_num_threads(int threads) {
  PAC_CHECK(threads >= 1, "set_num_threads: need at least one thread, got {}", threads);
  openblas_set_num_threads(threads);
#ifdef PAC_WITH_DNNL
  omp_set_num_threads(threads);
#endif
}

int num_threads() { return openblas_get_num_threads(); }

}  // namespace pac::cpu
