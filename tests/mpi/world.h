// The MPI process group shared by the multi-rank tests.
#pragma once

#include "comm/process_group.h"

namespace pac::testing {

comm::ProcessGroup& world();

}  // namespace pac::testing
