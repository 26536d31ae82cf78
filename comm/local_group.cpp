// The process group of a single process: every collective is the identity (or a copy), nothing
// is sent, and nothing outside this file is needed at run time.
#include "comm/process_group.h"

namespace pac::comm {

namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
};

class LocalGroup : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string backend() const override { return "local"; }
  WorkPtr all_reduce(Tensor, ReduceOp) override { return done(); }
  WorkPtr broadcast(Tensor, int root) override {
    PAC_CHECK(root == 0, "broadcast: root {} does not exist in a group of 1", root);
    return done();
  }
  WorkPtr all_gather(Tensor in, Tensor out) override {
    out.copy_(in.view_flat(0, out.shape()));
    return done();
  }
  WorkPtr all_gather_v(Tensor in, Tensor out, std::vector<int64_t> counts) override {
    PAC_CHECK(counts.size() == 1 && counts[0] == in.numel() && out.numel() == in.numel(),
              "all_gather_v: counts do not match a group of 1");
    out.copy_(in.view_flat(0, out.shape()));
    return done();
  }
  WorkPtr reduce_scatter(Tensor in, Tensor out, ReduceOp) override {
    out.copy_(in.view_flat(0, out.shape()));
    return done();
  }
  void barrier() override {}

 private:
  static WorkPtr done() { return std::make_shared<DoneWork>(); }
};

}  // namespace

ProcessGroupPtr make_local_group() { return std::make_shared<LocalGroup>(); }

}  // namespace pac::comm
