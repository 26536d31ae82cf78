// powersgd (Vogels et al. 2019, as PyTorch's powerSGD_hook): each matrix-shaped gradient M
// (a parameter viewed as [rows, cols]) is sent as a rank-r product P Q^T. One step of power
// iteration per training step, warm-started from the previous Q:
//   M += error;  P = M Q;  all-reduce(P);  orthogonalise P;  Q = M^T P;  all-reduce(Q);
//   M' = P Q^T;  error = M - M'.
// 1-D parameters and matrices too small to gain from it are all-reduced densely, and every
// bucket goes dense for the first `start_iter` steps.
#include <cmath>

#include "comm/compressors/builtin.h"
#include "core/cpu/gemm.h"
#include "core/generator.h"
#include "core/option_reader.h"

namespace pac::comm {

namespace {

// Gram-Schmidt on the columns of p [rows, r], in place.
void orthogonalise(float* p, int64_t rows, int64_t r) {
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

class PowerSgd : public Compressor {
 public:
  PowerSgd(int64_t rank, int64_t start_iter, uint64_t seed)
      : rank_(rank), start_iter_(start_iter), seed_(seed) {}
  std::string name() const override { return "powersgd"; }

  WorkPtr reduce(Bucket& bucket, ProcessGroup& group) override {
    keep_for_undo(steps_[bucket.index]);
    if (steps_[bucket.index]++ < static_cast<uint64_t>(start_iter_)) {
      return group.all_reduce(bucket.flat, ReduceOp::avg);
    }
    auto st = std::make_shared<std::vector<Matrix>>();
    Tensor flat = bucket.flat;
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
        st->push_back(matrix_state(bucket.index, e, entry, f.rows, f.cols, f.r));
        keep_for_undo(st->back().q);
        keep_for_undo(st->back().error);
        st->back().p_offset = p_total;
        p_total += f.rows * f.r;
      }
      all_p = Tensor::empty({p_total});
      for (auto& m : *st) {
        float* M = flat.data<float>() + m.offset;  // M += error, then P = M Q
        const float* err = m.error.data<float>();
        for (int64_t i = 0; i < m.rows * m.cols; ++i) M[i] += err[i];
        cpu::sgemm(false, false, m.rows, m.r, m.cols, 1.0f, M, m.cols, m.q.data<float>(), m.r, 0.0f,
                   all_p.data<float>() + m.p_offset, m.r);
      }
    });
    Tensor dense = Tensor::empty({static_cast<int64_t>(dense_positions.size())});
    for (size_t j = 0; j < dense_positions.size(); ++j) {
      dense.data<float>()[j] = flat.data<float>()[dense_positions[j]];
    }
    std::vector<WorkPtr> first;
    if (dense.numel()) first.push_back(group.all_reduce(dense, ReduceOp::avg));
    if (all_p.numel()) first.push_back(group.all_reduce(all_p, ReduceOp::avg));
    if (first.empty()) return group.all_reduce(flat, ReduceOp::avg);
    ProcessGroup* g = &group;
    return then(first.back(), [this, first, st, flat, all_p, dense, dense_positions, g]() mutable {
      for (auto& w : first) w->wait();
      for (size_t j = 0; j < dense_positions.size(); ++j) {
        flat.data<float>()[dense_positions[j]] = dense.data<float>()[j];
      }
      if (st->empty()) return;
      int64_t q_total = 0;
      for (auto& m : *st) q_total += m.cols * m.r;
      Tensor all_q = Tensor::empty({q_total});
      timed([&] {
        int64_t q_at = 0;
        for (auto& m : *st) {
          float* p = all_p.data<float>() + m.p_offset;
          orthogonalise(p, m.rows, m.r);
          // Q = M^T P
          cpu::sgemm(true, false, m.cols, m.r, m.rows, 1.0f, flat.data<float>() + m.offset, m.cols,
                     p, m.r, 0.0f, all_q.data<float>() + q_at, m.r);
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
          std::copy(all_q.data<float>() + q_at, all_q.data<float>() + q_at + m.cols * m.r, q);
          q_at += m.cols * m.r;
          std::copy(M, M + m.rows * m.cols, err);  // error = M - P Q^T
          cpu::sgemm(false, true, m.rows, m.cols, m.r, 1.0f, all_p.data<float>() + m.p_offset, m.r,
                     q, m.r, 0.0f, M, m.cols);
          for (int64_t i = 0; i < m.rows * m.cols; ++i) err[i] -= M[i];
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

  // The factors and errors hold offsets into the old layout; the step counter stays.
  void layout_changed(const Bucket& bucket) override {
    for (auto it = matrices_.begin(); it != matrices_.end();)
      it = it->first.first == bucket.index ? matrices_.erase(it) : std::next(it);
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
                      int64_t r) {
    auto key = std::make_pair(bucket, entry);
    auto it = matrices_.find(key);
    if (it == matrices_.end()) {
      // Every rank draws the same initial Q (same seed), as PyTorch's hook does.
      Generator g(seed_ + 7919u * static_cast<uint64_t>(bucket) + entry);
      Matrix m{e.offset, rows, cols, r, 0, g.randn({cols, r}), Tensor::zeros({rows, cols})};
      it = matrices_.emplace(key, m).first;
    }
    return it->second;  // shares the q and error storage
  }

  int64_t rank_, start_iter_;
  uint64_t seed_;
  std::map<std::pair<int, size_t>, Matrix> matrices_;
  std::map<int, uint64_t> steps_;
};

}  // namespace

std::unique_ptr<Compressor> make_powersgd(const CompressorOptions& options) {
  OptionReader read("--compress-opt", "powersgd", options);
  auto rank = static_cast<int64_t>(read.number("rank", 2));
  auto start_iter = static_cast<int64_t>(read.number("start_iter", 10));
  auto seed = static_cast<uint64_t>(read.number("seed", 0));
  read.finish();
  PAC_CHECK(rank >= 1, "powersgd: rank must be >= 1, got {}", rank);
  PAC_CHECK(start_iter >= 0, "powersgd: start_iter must be >= 0, got {}", start_iter);
  return std::make_unique<PowerSgd>(rank, start_iter, seed);
}

}  // namespace pac::comm
