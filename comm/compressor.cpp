#include "comm/compressor.h"

#include <chrono>

namespace pac::comm {

void Compressor::timed(const std::function<void()>& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  ++kernels_;
  codec_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string bucket_state_key(int bucket, const std::string& what) {
  return "bucket" + std::to_string(bucket) + "." + what;
}

void Compressor::load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                            ProcessGroup& group) {
  (void)buckets, (void)group;
  StateReader("compressor " + name(), state).finish();  // a stateless compressor takes none
}

namespace {

class ThenWork : public Work {
 public:
  ThenWork(WorkPtr inner, std::function<void()> after)
      : inner_(std::move(inner)), after_(std::move(after)) {}
  void wait() override {
    inner_->wait();
    if (after_) {
      auto f = std::move(after_);
      after_ = nullptr;
      f();
    }
  }

 private:
  WorkPtr inner_;
  std::function<void()> after_;
};

}  // namespace

WorkPtr then(WorkPtr inner, std::function<void()> after) {
  return std::make_shared<ThenWork>(std::move(inner), std::move(after));
}

}  // namespace pac::comm
