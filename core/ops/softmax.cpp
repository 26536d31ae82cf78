// softmax and log_softmax over one dimension (max-subtracted for stability), and cross-entropy
// from logits, whose backward is the classic (softmax - target) / N.
#include <cmath>

#include "core/cuda/kernels.h"
#include "core/ops.h"
#include "core/ops/op_util.h"
#include "core/ops/vector_math.h"

namespace pac {

// Writes softmax (or log-softmax) of x along the [outer, size, inner] split into out.
// One row of the last dimension: its exponentials are written once and rescaled, through the
// branch-free exp of vector_math.h so that the loops vectorise. Inputs below -104 give exactly
// 0, as e^-104 is below the smallest float. The inputs are multiplied by `scale` first, and with
// causal_queries = T > 0 row r is a query of [..., T, size] attention scores that sees its first
// r % T + size - T + 1 entries only: the rest get probability 0 (log-probability -inf).
PAC_SIMD_CLONES static void softmax_rows(const float* x, float* out, int64_t rows, int64_t size,
                                         bool log_space, float scale, int64_t causal_queries) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * size;
    float* dst = out + r * size;
    const int64_t limit =
        causal_queries > 0 ? r % causal_queries + size - causal_queries + 1 : size;
    float peak = -INFINITY;
    for (int64_t k = 0; k < limit; ++k) peak = std::max(peak, row[k] * scale);
    double total = 0.0;
    for (int64_t k = 0; k < limit; ++k) {
      dst[k] = vec::exp(std::max(row[k] * scale - peak, -104.0f));
      total += dst[k];
    }
    if (log_space) {
      const float shift = peak + static_cast<float>(std::log(total));
      for (int64_t k = 0; k < limit; ++k) dst[k] = row[k] * scale - shift;
    } else {
      const float inverse = static_cast<float>(1.0 / total);
      for (int64_t k = 0; k < limit; ++k) dst[k] *= inverse;
    }
    for (int64_t k = limit; k < size; ++k) dst[k] = log_space ? -INFINITY : 0.0f;
  }
}

static void softmax_kernel(const float* x, float* out, detail::DimSplit s, bool log_space,
                           float scale, int64_t causal_queries) {
  if (s.inner == 1) return softmax_rows(x, out, s.outer, s.size, log_space, scale, causal_queries);
  // Over an inner dimension: plain softmax (attention_softmax always takes the last one).
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      const float* row = x + o * s.size * s.inner + i;
      float* dst = out + o * s.size * s.inner + i;
      float peak = -INFINITY;
      for (int64_t k = 0; k < s.size; ++k) peak = std::max(peak, row[k * s.inner]);
      double total = 0.0;
      for (int64_t k = 0; k < s.size; ++k) total += std::exp(row[k * s.inner] - peak);
      float log_total = static_cast<float>(std::log(total));
      for (int64_t k = 0; k < s.size; ++k) {
        float shifted = row[k * s.inner] - peak - log_total;
        dst[k * s.inner] = log_space ? shifted : std::exp(shifted);
      }
    }
  }
}

class SoftmaxBackward : public Node {
 public:
  SoftmaxBackward(Tensor y, int64_t dim, bool log_space, float scale)
      : y_(std::move(y)), dim_(dim), log_space_(log_space), scale_(scale) {}
  std::string name() const override {
    return log_space_ ? "LogSoftmaxBackward" : "SoftmaxBackward";
  }

  // softmax:     gx = y * (g - sum(g * y))
  // log_softmax: gx = g - exp(y) * sum(g)
  // both times the input's scale; masked entries have y = 0 and so get no gradient.
  std::vector<Tensor> apply(const Tensor& g) override {
    auto s = detail::split_at(y_.shape(), dim_);
    Tensor gx = detail::empty_on(y_.shape(), y_);
    const float* py = y_.data<float>();
    const float* pg = g.data<float>();
    float* out = gx.data<float>();
    if (gx.is_cuda()) {
      cuda::softmax_backward(py, pg, out, s.outer, s.size, s.inner, log_space_, scale_);
      return {gx};
    }
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        int64_t base = o * s.size * s.inner + i;
        float dot = 0.0f;
        for (int64_t k = 0; k < s.size; ++k) {
          int64_t at = base + k * s.inner;
          dot += log_space_ ? pg[at] : pg[at] * py[at];
        }
        for (int64_t k = 0; k < s.size; ++k) {
          int64_t at = base + k * s.inner;
          out[at] =
              scale_ * (log_space_ ? pg[at] - std::exp(py[at]) * dot : py[at] * (pg[at] - dot));
        }
      }
    }
    return {gx};
  }

 private:
  Tensor y_;  // the forward output, detached
  int64_t dim_;
  bool log_space_;
  float scale_;
};

static Tensor softmax_op(const Tensor& x, int64_t dim, bool log_space, const char* op,
                         float scale = 1.0f, int64_t causal_queries = 0) {
  detail::check_float(x, op, "x");
  int64_t d = detail::normalize_dim(dim, x.dim(), op);
  Tensor y = detail::empty_on(x.shape(), x);
  auto s = detail::split_at(x.shape(), d);
  if (x.is_cuda()) {
    cuda::softmax_forward(x.data<float>(), y.data<float>(), s.outer, s.size, s.inner, log_space,
                          scale, causal_queries);
  } else {
    softmax_kernel(x.data<float>(), y.data<float>(), s, log_space, scale, causal_queries);
  }
  if (any_requires_grad({x})) {
    detail::record(y, {x}, std::make_shared<SoftmaxBackward>(y.detach(), d, log_space, scale));
  }
  return y;
}

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, false, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, true, "log_softmax"); }

Tensor attention_softmax(const Tensor& scores, float scale, bool causal) {
  PAC_CHECK(scores.dim() >= 2, "attention_softmax: scores must be [..., queries, keys], got {}",
            scores.str());
  const int64_t queries = scores.size(-2), keys = scores.size(-1);
  PAC_CHECK(!causal || keys >= queries,
            "attention_softmax: a causal mask needs at least as many keys as queries, got {}",
            scores.str());
  return softmax_op(scores, -1, false, "attention_softmax", scale, causal ? queries : 0);
}

// --- cross-entropy: target distribution q = (1 - eps) onehot(label) + eps / C ---
class CrossEntropyBackward : public Node {
 public:
  CrossEntropyBackward(Tensor log_probs, Tensor labels, float smoothing)
      : log_probs_(std::move(log_probs)), labels_(std::move(labels)), smoothing_(smoothing) {}
  std::string name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    int64_t n = log_probs_.size(0), c = log_probs_.size(1);
    bool i64 = labels_.dtype() == DType::i64;
    Tensor gx = detail::empty_on(log_probs_.shape(), log_probs_);
    const float* lp = log_probs_.data<float>();
    float* out = gx.data<float>();
    if (gx.is_cuda()) {
      cuda::cross_entropy_backward(lp, labels_.raw_data(), i64, g.data<float>(), out, n, c,
                                   smoothing_);
      return {gx};
    }
    float scale = g.item() / static_cast<float>(n);
    float uniform = smoothing_ / static_cast<float>(c);
    for (int64_t r = 0; r < n; ++r) {
      int64_t label = i64 ? labels_.data<int64_t>()[r] : labels_.data<int32_t>()[r];
      for (int64_t k = 0; k < c; ++k) {
        float target = uniform + (k == label ? 1.0f - smoothing_ : 0.0f);
        out[r * c + k] = (std::exp(lp[r * c + k]) - target) * scale;
      }
    }
    return {gx};
  }

 private:
  Tensor log_probs_;
  Tensor labels_;  // i32 or i64, on the logits' device
  float smoothing_;
};

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, float label_smoothing) {
  detail::check_float(logits, "cross_entropy", "logits");
  PAC_CHECK(logits.dim() == 2, "cross_entropy: logits must be [N, C], got {}", logits.str());
  PAC_CHECK(labels.defined() && (labels.dtype() == DType::i64 || labels.dtype() == DType::i32),
            "cross_entropy: labels must be i32 or i64, got {}",
            labels.defined() ? labels.str() : "undefined");
  detail::check_same_device(logits, labels, "cross_entropy", "labels");
  PAC_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0),
            "cross_entropy: labels {} do not match logits {} (expected [{}])", labels.str(),
            logits.str(), logits.size(0));
  PAC_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f,
            "cross_entropy: label_smoothing must be in [0, 1], got {}", label_smoothing);
  int64_t n = logits.size(0), c = logits.size(1);
  PAC_CHECK(n > 0, "cross_entropy: empty batch {}", logits.str());
  bool i64 = labels.dtype() == DType::i64;
  Tensor log_probs = detail::empty_on(logits.shape(), logits);
  Tensor loss;
  if (logits.is_cuda()) {
    // Labels are checked on the device: an out-of-range one makes the loss NaN.
    cuda::softmax_forward(logits.data<float>(), log_probs.data<float>(), n, c, 1, true, 1.0f, 0);
    loss = detail::empty_on({}, logits);
    cuda::cross_entropy_forward(log_probs.data<float>(), labels.raw_data(), i64, loss.data<float>(),
                                n, c, label_smoothing);
  } else {
    std::vector<int64_t> label_values(n);
    for (int64_t r = 0; r < n; ++r) {
      label_values[r] = i64 ? labels.data<int64_t>()[r] : labels.data<int32_t>()[r];
      PAC_CHECK(label_values[r] >= 0 && label_values[r] < c,
                "cross_entropy: label {} at position {} is outside [0, {})", label_values[r], r, c);
    }
    softmax_kernel(logits.data<float>(), log_probs.data<float>(), {n, c, 1}, true, 1.0f, 0);
    const float* lp = log_probs.data<float>();
    double total = 0.0;
    for (int64_t r = 0; r < n; ++r) {
      double row_sum = 0.0;
      for (int64_t k = 0; k < c; ++k) row_sum += lp[r * c + k];
      total -= (1.0 - label_smoothing) * lp[r * c + label_values[r]] +
               label_smoothing / static_cast<double>(c) * row_sum;
    }
    loss = Tensor::scalar(static_cast<float>(total / static_cast<double>(n)));
  }
  if (any_requires_grad({logits})) {
    detail::record(
        loss, {logits},
        std::make_shared<CrossEntropyBackward>(log_probs, labels.detach(), label_smoothing));
  }
  return loss;
}

}  // namespace pac
