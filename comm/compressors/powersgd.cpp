// powersgd (Vogels et al. 2019, as PyTorch's powerSGD_hook): each matrix-shaped gradient M
// (a parameter viewed as [rows, cols]) is sent as a rank-r product P Q^T. One step of power
// iteration per training step, warm-started from the previous Q:
//   M += error;  P = M Q;  all-reduce(P);  orthogonalise P;  Q = M^T P;  all-reduce(Q);
//   M' = P Q^T;  error = M - M'.
// 1-D parameters and matrices too small to gain from it are all-reduced densely, and every
// bucket goes dense for the first `start_iter` steps. On GPU buckets the same steps run there:
// the products on cuBLAS, Gram-Schmidt as one kernel (powersgd_kernels.cu).
#include <cmath>

#include "comm/compressors/builtin.h"
#include "comm/compressors/powersgd_kernels.h"
#include "core/cpu/gemm.h"
#include "core/cuda/kernels.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/option_reader.h"

namespace pac::comm {

namespace {

// Gram-Schmidt on the columns of p [rows, r], in place.
void orthogonalise_host(float* p, int64_t rows, int64_t r) {
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0.0;
      for (int64_t i = 0; i < rows; ++i) dot += double(p[i * r + j]) * p[i * r + k];
      for (int64_t i = 0; i < rows; ++i) p[i * r + j] -= static_cast<float>(dot) * p[i * r + k];
    }
    double norm = 0.0;
    for (int64_t i = 0; i < rows; ++i) norm += double(p[i * r + j]) * p[i * r + j];
    float inv = 1.0f / static_cast<float>(std::sqrt(norm) + 1e-8);
    for (int64_t i = 0; i < rows; ++i) p[i * r + j] *= inv;
  }
}

// The few primitives the algorithm is made of, on the bucket's device (pointers into it).
struct Primitives {
  bool gpu = false;
  // Row-major C = op(A) op(B), as cpu::sgemm.
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
            int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) const {
    if (gpu)
      cuda::gemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    else
      cpu::sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  }
  // a += sign * b
  void accumulate(float* a, float sign, const float* b, int64_t n) const {
    if (gpu) return cuda::axpy(a, sign, b, n);
    for (int64_t i = 0; i < n; ++i) a[i] += sign * b[i];
  }
  void copy(float* dst, const float* src, int64_t n) const {
    if (gpu) return cuda::copy_rows(dst, n, src, n, 1, n);
    std::copy(src, src + n, dst);
  }
  void orthogonalise(float* p, int64_t rows, int64_t r) const {
    if (gpu) return gpu::orthogonalise_columns(p, rows, r);
    orthogonalise_host(p, rows, r);
  }
};

class PowerSgd : public Compressor {
 public:
  PowerSgd(int64_t rank, int64_t start_iter, uint64_t seed)
      : rank_(rank), start_iter_(start_iter), seed_(seed) {}
  std::string name() const override { return "powersgd"; }
  bool runs_on_gpu() const override { return true; }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    keep_for_undo(steps_[bucket.index]);
    if (steps_[bucket.index]++ < static_cast<uint64_t>(start_iter_)) {
      return group.all_reduce(bucket.flat, ReduceOp::avg);
    }
    auto st = std::make_shared<std::vector<Matrix>>();
    Tensor flat = bucket.flat;
    const Device device = flat.device();
    const Primitives on{!device.is_cpu()};
    std::vector<int64_t> dense_positions;
    Tensor all_p;
    timed([&] {
      int64_t p_total = 0;
      for (size_t e = 0; e < bucket.entries.size(); ++e) {
        const auto& entry = bucket.entries[e];
        Factoring f = factoring(entry);
        if (f.r == 0) {
          for (int64_t i = 0; i < entry.numel; ++i) dense_positions.push_back(entry.offset + i);
          continue;
        }
        st->push_back(matrix_state(bucket.index, e, entry, f.rows, f.cols, f.r, device));
        keep_for_undo(st->back().q);
        keep_for_undo(st->back().error);
        st->back().p_offset = p_total;
        p_total += f.rows * f.r;
      }
      all_p = Tensor::empty({p_total}, DType::f32, device);
      for (auto& m : *st) {
        float* M = flat.data<float>() + m.offset;  // M += error, then P = M Q
        on.accumulate(M, 1.0f, m.error.data<float>(), m.rows * m.cols);
        on.gemm(false, false, m.rows, m.r, m.cols, M, m.cols, m.q.data<float>(), m.r,
                all_p.data<float>() + m.p_offset, m.r);
      }
    });
    // The values that travel densely, gathered by position (on the bucket's device; the positions
    // are copied there once per layout).
    Tensor& dense_index = dense_indices_[bucket.index];
    if (!dense_index.defined()) {
      Tensor host = Tensor::empty({static_cast<int64_t>(dense_positions.size())}, DType::i32);
      for (size_t j = 0; j < dense_positions.size(); ++j)
        host.data<int32_t>()[j] = static_cast<int32_t>(dense_positions[j]);
      dense_index = host.to(device);
    }
    Tensor dense = Tensor::empty({dense_index.numel()}, DType::f32, device);
    if (dense.numel()) index_gather_(dense, flat, dense_index);
    std::vector<WorkPtr> first;
    if (dense.numel()) first.push_back(group.all_reduce(dense, ReduceOp::avg));
    if (all_p.numel()) first.push_back(group.all_reduce(all_p, ReduceOp::avg));
    if (first.empty()) return group.all_reduce(flat, ReduceOp::avg);
    ProcessGroup* g = &group;
    return then(first.back(), [this, first, st, flat, all_p, dense, dense_index, g, on]() mutable {
      for (auto& w : first) w->wait();
      if (dense.numel()) index_scatter_(flat, dense, dense_index);
      if (st->empty()) return;
      int64_t q_total = 0;
      for (auto& m : *st) q_total += m.cols * m.r;
      Tensor all_q = Tensor::empty({q_total}, DType::f32, flat.device());
      timed([&] {
        int64_t q_at = 0;
        for (auto& m : *st) {
          float* p = all_p.data<float>() + m.p_offset;
          on.orthogonalise(p, m.rows, m.r);
          // Q = M^T P
          on.gemm(true, false, m.cols, m.r, m.rows, flat.data<float>() + m.offset, m.cols, p, m.r,
                  all_q.data<float>() + q_at, m.r);
          q_at += m.cols * m.r;
        }
      });
      g->all_reduce(all_q, ReduceOp::avg)->wait();
      timed([&] {
        int64_t q_at = 0;
        for (auto& m : *st) {
          float* M = flat.data<float>() + m.offset;
          float* err = m.error.data<float>();
          float* q = m.q.data<float>();
          on.copy(q, all_q.data<float>() + q_at, m.cols * m.r);
          q_at += m.cols * m.r;
          on.copy(err, M, m.rows * m.cols);  // error = M - P Q^T
          on.gemm(false, true, m.rows, m.cols, m.r, all_p.data<float>() + m.p_offset, m.r, q, m.r,
                  M, m.cols);
          on.accumulate(err, -1.0f, M, m.rows * m.cols);
        }
      });
    });
  }

  StateDict state() const override {
    StateDict out;
    for (const auto& [key, m] : matrices_) {
      std::string entry = "entry" + std::to_string(key.second) + ".";
      out[bucket_state_key(key.first, entry + "q")] = m.q;
      out[bucket_state_key(key.first, entry + "error")] = m.error;
    }
    save_per_bucket(out, "steps", steps_);
    return out;
  }

  void load_state(const StateDict& state, const std::vector<Bucket>& buckets,
                  ProcessGroup&) override {
    StateReader read("compressor powersgd", state);
    load_per_bucket(read, "steps", buckets, steps_);
    for (const auto& bucket : buckets) {
      for (size_t e = 0; e < bucket.entries.size(); ++e) {
        std::string entry = "entry" + std::to_string(e) + ".";
        Factoring f = factoring(bucket.entries[e]);
        if (f.r == 0 || !read.has(bucket_state_key(bucket.index, entry + "q"))) continue;
        Matrix m{bucket.entries[e].offset,
                 f.rows,
                 f.cols,
                 f.r,
                 0,
                 read.tensor(bucket_state_key(bucket.index, entry + "q"), {f.cols, f.r}),
                 read.tensor(bucket_state_key(bucket.index, entry + "error"), {f.rows, f.cols})};
        matrices_[std::make_pair(bucket.index, e)] = m;
      }
    }
    read.finish();
  }

  // Q is the all-reduced factor, the same on every rank, and so is the step count; the error
  // is each rank's own.
  RankStateRule rank_state_rule(const std::string& what) const override {
    const bool error = what.size() > 6 && what.compare(what.size() - 6, 6, ".error") == 0;
    return error ? RankStateRule::mean : RankStateRule::shared;
  }

  // The factors, errors and dense positions belong to the old layout; the step counter stays.
  void layout_changed(const Bucket& bucket) override {
    for (auto it = matrices_.begin(); it != matrices_.end();)
      it = it->first.first == bucket.index ? matrices_.erase(it) : std::next(it);
    dense_indices_.erase(bucket.index);
  }

 private:
  // The parameter viewed as a [rows, cols] matrix and the rank r of its factors; r = 0 when it
  // is all-reduced densely instead (1-D, or the factors would not be smaller than the matrix, or
  // a pruned weight, whose gradient is a compact vector of its kept entries, not a matrix).
  struct Factoring {
    int64_t rows, cols, r;
  };
  Factoring factoring(const BucketEntry& entry) const {
    const Shape& shape = entry.param->shape();
    int64_t rows = shape.empty() ? 1 : shape[0];
    int64_t cols = rows ? entry.numel / rows : 0;
    int64_t r = std::min({rank_, rows, cols});
    if (shape.size() < 2 || entry.compact || (rows + cols) * r >= rows * cols) r = 0;
    return {rows, cols, r};
  }

  struct Matrix {
    int64_t offset, rows, cols, r, p_offset = 0;
    Tensor q, error;  // persistent: the warm start and the error feedback
  };

  Matrix matrix_state(int bucket, size_t entry, const BucketEntry& e, int64_t rows, int64_t cols,
                      int64_t r, Device device) {
    auto key = std::make_pair(bucket, entry);
    auto it = matrices_.find(key);
    if (it == matrices_.end()) {
      // Every rank draws the same initial Q (same seed), as PyTorch's hook does.
      Generator g(seed_ + 7919u * static_cast<uint64_t>(bucket) + entry);
      Matrix m{e.offset,
               rows,
               cols,
               r,
               0,
               g.randn({cols, r}).to(device),
               Tensor::zeros({rows, cols}, DType::f32, device)};
      it = matrices_.emplace(key, m).first;
    }
    Matrix& m = it->second;
    // A checkpoint's state arrives in host memory.
    if (m.q.device() != device) m.q = m.q.to(device);
    if (m.error.device() != device) m.error = m.error.to(device);
    return m;  // shares the q and error storage
  }

  int64_t rank_, start_iter_;
  uint64_t seed_;
  std::map<std::pair<int, size_t>, Matrix> matrices_;
  std::map<int, Tensor> dense_indices_;  // by bucket index: positions that travel densely
  std::map<int, uint64_t> steps_;
};

}  // namespace

std::unique_ptr<Compressor> make_powersgd(const CompressorOptions& options) {
  OptionReader read("--compress-opt", "powersgd", options);
  auto rank = read.integer("rank", 2);
  auto start_iter = read.integer("start_iter", 10);
  auto seed = static_cast<uint64_t>(read.integer("seed", 0));
  read.finish();
  PAC_CHECK(rank >= 1, "powersgd: rank must be >= 1, got {}", rank);
  PAC_CHECK(start_iter >= 0, "powersgd: start_iter must be >= 0, got {}", start_iter);
  return std::make_unique<PowerSgd>(rank, start_iter, seed);
}

}  // namespace pac::comm
