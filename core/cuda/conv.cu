// Convolution through cuDNN. The first call with a given shape times cuDNN's algorithms
// (cudnnFind*, as PyTorch's cudnn.benchmark) and remembers the fastest for the forward, the
// data gradient and the filter gradient, for the most recent shapes (a bounded cache);
// workspaces come from the caching allocator.
#include <memory>
#include <utility>

#include "core/allocator.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/lru_cache.h"

namespace pac::cuda {

namespace {

int as_int(int64_t v) { return static_cast<int>(v); }

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t forward_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  size_t forward_bytes = 0, data_bytes = 0, filter_bytes = 0;
  // The math type each algorithm was timed with. cudnnFind* reports it per result, and an
  // algorithm runs its tensor-core kernel only when the descriptor carries that math type at
  // the call: run under the plain setting, the fastest TF32 algorithm fell back to its FMA twin
  // (ResNet-50 on an H200 ran legacy FMA kernels for most convolutions).
  cudnnMathType_t allowed_math{}, forward_math{}, data_math{}, filter_math{};
  bool data_ready = false, filter_ready = false;  // backward algorithms are found on first use

  explicit ConvPlan(const cpu::ConvShape& s) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(s.batch),
                                           as_int(s.in_channels), as_int(s.height),
                                           as_int(s.width)));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(s.batch),
                                           as_int(s.out_channels), as_int(s.out_h),
                                           as_int(s.out_w)));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                           as_int(s.out_channels), 1, 1));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                           as_int(s.out_channels), as_int(s.in_channels / s.groups),
                                           as_int(s.kernel_h), as_int(s.kernel_w)));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv, as_int(s.pad_h), as_int(s.pad_w), as_int(s.stride_h), as_int(s.stride_w),
        as_int(s.dilation_h), as_int(s.dilation_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, as_int(s.groups)));
    // Default math lets cuDNN use TF32 tensor cores for fp32; FMA math keeps full fp32.
    allowed_math = allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, allowed_math));
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(
        cudnn(), x, w, conv, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
    int best = first_usable(perf, found, "forward");
    forward_algo = perf[best].algo;
    forward_bytes = perf[best].memory;
    forward_math = perf[best].mathType;
  }
  ~ConvPlan() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(bias);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;

  void find_data_algorithm() {
    int found = 0;
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, allowed_math));
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(
        cudnn(), w, y, conv, x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, perf));
    int best = first_usable(perf, found, "backward data");
    data_algo = perf[best].algo;
    data_bytes = perf[best].memory;
    data_math = perf[best].mathType;
    data_ready = true;
  }

  void find_filter_algorithm() {
    int found = 0;
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, allowed_math));
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(
        cudnn(), x, y, conv, w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, perf));
    int best = first_usable(perf, found, "backward filter");
    filter_algo = perf[best].algo;
    filter_bytes = perf[best].memory;
    filter_math = perf[best].mathType;
    filter_ready = true;
  }

  // cudnnFind* sorts by time; the first entry that ran is the fastest. Without TF32, an entry
  // timed with tensor-core math is passed over, so that fp32 stays fp32.
  template <class Perf>
  int first_usable(const Perf* perf, int found, const char* what) const {
    for (int i = 0; i < found; ++i) {
      const bool tensor_cores = perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                                perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
      if (allowed_math == CUDNN_FMA_MATH && tensor_cores) continue;
      if (perf[i].status == CUDNN_STATUS_SUCCESS) return i;
    }
    PAC_FAIL("conv2d: cuDNN found no {} algorithm for this shape", what);
  }
};

// A scratch buffer from the caching allocator for one call.
class Workspace {
 public:
  explicit Workspace(size_t bytes) : bytes_(bytes), data_(cuda_allocate(bytes, tag_)) {}
  ~Workspace() { cuda_free(data_, bytes_, tag_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  MemoryTag tag_ = current_memory_tag();  // declared first: the allocation reads it
  size_t bytes_;
  void* data_;
};

// The plans, one per shape and TF32 setting, at most this many: a ResNet-50 step uses about 60
// shapes (with its last batch and evaluation, three times that), so this bound is only reached by
// runs whose shapes keep changing, and there it keeps memory (and cuDNN descriptors) in check.
constexpr size_t max_conv_plans = 512;

std::shared_ptr<ConvPlan> plan_for(const cpu::ConvShape& s) {
  static auto* plans = new LruCache<std::pair<cpu::ConvShape, bool>, ConvPlan>(max_conv_plans);
  return plans->get(std::make_pair(s, allow_tf32()), [&] { return std::make_unique<ConvPlan>(s); });
}

}  // namespace

void conv_forward(const cpu::ConvShape& s, const float* x, const float* w, const float* bias,
                  float* y) {
  const std::shared_ptr<ConvPlan> plan = plan_for(s);
  ConvPlan& p = *plan;
  Workspace workspace(p.forward_bytes);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, p.forward_math));
  CUDNN_CHECK(cudnnConvolutionForward(cudnn(), &one, p.x, x, p.w, w, p.conv, p.forward_algo,
                                      workspace.data(), workspace.size(), &zero, p.y, y));
  if (bias != nullptr) CUDNN_CHECK(cudnnAddTensor(cudnn(), &one, p.bias, bias, &one, p.y, y));
}

void conv_backward_data(const cpu::ConvShape& s, const float* grad_y, const float* w,
                        float* grad_x) {
  const std::shared_ptr<ConvPlan> plan = plan_for(s);
  ConvPlan& p = *plan;
  if (!p.data_ready) p.find_data_algorithm();
  Workspace workspace(p.data_bytes);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, p.data_math));
  CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn(), &one, p.w, w, p.y, grad_y, p.conv, p.data_algo,
                                           workspace.data(), workspace.size(), &zero, p.x, grad_x));
}

void conv_backward_filter(const cpu::ConvShape& s, const float* x, const float* grad_y,
                          float* grad_w, float* grad_bias) {
  const std::shared_ptr<ConvPlan> plan = plan_for(s);
  ConvPlan& p = *plan;
  const float one = 1.0f, zero = 0.0f;
  if (grad_w != nullptr) {
    if (!p.filter_ready) p.find_filter_algorithm();
    Workspace workspace(p.filter_bytes);
    CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, p.filter_math));
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn(), &one, p.x, x, p.y, grad_y, p.conv,
                                               p.filter_algo, workspace.data(), workspace.size(),
                                               &zero, p.w, grad_w));
  }
  if (grad_bias != nullptr) {
    CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn(), &one, p.y, grad_y, &zero, p.bias, grad_bias));
  }
}

}  // namespace pac::cuda
