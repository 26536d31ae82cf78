// dense: the reference. One fp32 all-reduce of the whole bucket, averaged.
#include "comm/compressors/builtin.h"

namespace pac::comm {

namespace {

class Dense : public Compressor {
 public:
  std::string name() const override { return "dense"; }
  bool runs_on_gpu() const override { return true; }
  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    ++kernels_;  // the average's division by the world size, after the sum
    return all_reduce_with_riders(bucket, group, {{bucket.flat, ReduceOp::avg}});
  }
};

}  // namespace

std::unique_ptr<Compressor> make_dense(const CompressorOptions& options) {
  check_no_options("dense", options);
  return std::make_unique<Dense>();
}

}  // namespace pac::comm
