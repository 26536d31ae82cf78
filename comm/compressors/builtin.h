// Factories of the built-in compressors, one per file in comm/compressors/, collected by the
// registry table in registry.cpp.
#pragma once

#include "comm/compressor.h"

namespace pac::comm {

std::unique_ptr<Compressor> make_dense(const CompressorOptions& options);
std::unique_ptr<Compressor> make_fp16(const CompressorOptions& options);
std::unique_ptr<Compressor> make_bf16(const CompressorOptions& options);
std::unique_ptr<Compressor> make_randomk(const CompressorOptions& options);
std::unique_ptr<Compressor> make_terngrad(const CompressorOptions& options);
std::unique_ptr<Compressor> make_topk(const CompressorOptions& options);
std::unique_ptr<Compressor> make_powersgd(const CompressorOptions& options);
std::unique_ptr<Compressor> make_pactrain(const CompressorOptions& options);
std::unique_ptr<Compressor> make_signsgd(const CompressorOptions& options);

// Throws when a compressor that takes no options is given one.
void check_no_options(const char* compressor, const CompressorOptions& options);

}  // namespace pac::comm
