// Host staging: runs a compressor written for host memory on gradient buckets that live on the
// GPU. Each bucket is copied to a host mirror, the compressor reduces the mirror (the NCCL group
// sends host tensors through MPI), and the result is copied back. Every compressor thus works
// with --device cuda, but the copies wait for the GPU, so buckets do not overlap backward as they
// do with compressors that run on the GPU themselves (dense, fp16, bf16, pactrain).
#pragma once

#include <memory>

#include "comm/compressor.h"

namespace pac::comm {

std::unique_ptr<Compressor> stage_on_host(std::unique_ptr<Compressor> inner);

}  // namespace pac::comm
