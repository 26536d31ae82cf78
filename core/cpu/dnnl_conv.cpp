#include "core/cpu/dnnl_conv.h"

#include <list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>

#include "core/allocator.h"
#include "core/error.h"

namespace pac::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The three primitives of one convolution shape. Their memory layouts are chosen by oneDNN
// (format "any"), usually blocked ones; user buffers are reordered in and out around each call.
struct ConvPrimitives {
  dnnl::convolution_forward::primitive_desc forward;
  dnnl::convolution_backward_data::primitive_desc backward_data;
  dnnl::convolution_backward_weights::primitive_desc backward_weights;
  memory::desc x_user, w_user, y_user, b_user;  // the caller's dense NCHW / OIHW layouts
  dnnl::convolution_forward forward_op{forward};
  dnnl::convolution_backward_data backward_data_op{backward_data};
  dnnl::convolution_backward_weights backward_weights_op{backward_weights};
};

memory::dims weight_dims(const ConvShape& s) {
  if (s.groups == 1) return {s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
  return {s.groups, s.out_channels / s.groups, s.in_channels / s.groups, s.kernel_h, s.kernel_w};
}

ConvPrimitives make_primitives(const ConvShape& s) {
  auto& engine = cpu_engine();
  memory::dims x_dims{s.batch, s.in_channels, s.height, s.width};
  memory::dims y_dims{s.batch, s.out_channels, s.out_h, s.out_w};
  memory::dims w_dims = weight_dims(s);
  memory::dims b_dims{s.out_channels};
  memory::dims strides{s.stride_h, s.stride_w};
  memory::dims dilates{s.dilation_h - 1, s.dilation_w - 1};  // oneDNN counts the gaps
  memory::dims pad_l{s.pad_h, s.pad_w};
  // Padding on the right/bottom that the output size actually uses.
  memory::dims pad_r{
      (s.out_h - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1 - s.height - s.pad_h,
      (s.out_w - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1 - s.width - s.pad_w};
  memory::desc x_any(x_dims, dt::f32, tag::any), y_any(y_dims, dt::f32, tag::any);
  memory::desc w_any(w_dims, dt::f32, tag::any), b_md(b_dims, dt::f32, tag::x);
  auto algorithm = dnnl::algorithm::convolution_direct;
  // Scratch memory comes from our caching allocator (see Workspace), not from oneDNN.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);

  auto fwd_desc =
      s.has_bias
          ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, x_any,
                                            w_any, b_md, y_any, strides, dilates, pad_l, pad_r)
          : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, x_any,
                                            w_any, y_any, strides, dilates, pad_l, pad_r);
  dnnl::convolution_forward::primitive_desc fwd(fwd_desc, attr, engine);
  dnnl::convolution_backward_data::desc bwd_data_desc(algorithm, x_any, w_any, y_any, strides,
                                                      dilates, pad_l, pad_r);
  dnnl::convolution_backward_data::primitive_desc bwd_data(bwd_data_desc, attr, engine, fwd);
  auto bwd_w_desc = s.has_bias
                        ? dnnl::convolution_backward_weights::desc(
                              algorithm, x_any, w_any, b_md, y_any, strides, dilates, pad_l, pad_r)
                        : dnnl::convolution_backward_weights::desc(algorithm, x_any, w_any, y_any,
                                                                   strides, dilates, pad_l, pad_r);
  dnnl::convolution_backward_weights::primitive_desc bwd_w(bwd_w_desc, attr, engine, fwd);
  return {fwd,
          bwd_data,
          bwd_w,
          memory::desc(x_dims, dt::f32, tag::nchw),
          memory::desc(w_dims, dt::f32, s.groups == 1 ? tag::oihw : tag::goihw),
          memory::desc(y_dims, dt::f32, tag::nchw),
          b_md,
          dnnl::convolution_forward(fwd),
          dnnl::convolution_backward_data(bwd_data),
          dnnl::convolution_backward_weights(bwd_w)};
}

// A small most-recently-used cache: a network has a few dozen distinct convolution shapes.
const ConvPrimitives& primitives_for(const ConvShape& s) {
  static std::mutex mutex;
  static std::list<std::pair<ConvShape, std::shared_ptr<ConvPrimitives>>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = cache.begin(); it != cache.end(); ++it) {
    if (it->first == s) {
      cache.splice(cache.begin(), cache, it);
      return *cache.front().second;
    }
  }
  cache.emplace_front(s, std::make_shared<ConvPrimitives>(make_primitives(s)));
  if (cache.size() > 256) cache.pop_back();
  return *cache.front().second;
}

// Temporary buffers of one call (reordered copies, scratchpad), taken from the caching allocator
// and given back when the call returns: fresh pages would cost a page fault each.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() {
    for (auto& [ptr, size] : blocks_) cpu_free(ptr, size, tag_);
  }
  memory buffer(const memory::desc& md) {
    size_t size = md.get_size();
    void* ptr = cpu_allocate(size, tag_);
    blocks_.emplace_back(ptr, size);
    return memory(md, cpu_engine(), ptr);
  }

 private:
  std::vector<std::pair<void*, size_t>> blocks_;
  MemoryTag tag_ = current_memory_tag();
};

// A user buffer as the layout `wanted`: the buffer itself when the layouts agree, else a reordered
// copy. When `copy_in` is false the copy is left uninitialised (it will be an output).
memory as_layout(const memory::desc& user_md, const float* data, const memory::desc& wanted,
                 dnnl::stream& stream, Workspace& workspace, bool copy_in = true) {
  memory user(user_md, cpu_engine(), const_cast<float*>(data));
  if (user_md == wanted) return user;
  memory converted = workspace.buffer(wanted);
  if (copy_in) dnnl::reorder(user, converted).execute(stream, user, converted);
  return converted;
}

void copy_out(const memory& result, const memory::desc& user_md, float* data,
              dnnl::stream& stream) {
  if (result.get_desc() == user_md) return;  // the primitive wrote straight into the user buffer
  memory user(user_md, cpu_engine(), data);
  dnnl::reorder(result, user).execute(stream, const_cast<memory&>(result), user);
}

template <class F>
void guarded(const char* what, F f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    PAC_FAIL("oneDNN {}: {} (status {})", what, e.what(), static_cast<int>(e.status));
  }
}

}  // namespace

void dnnl_conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias,
                       float* y) {
  guarded("convolution forward", [&] {
    const auto& p = primitives_for(s);
    dnnl::stream stream(cpu_engine());
    Workspace workspace;
    memory xm = as_layout(p.x_user, x, p.forward.src_desc(), stream, workspace);
    memory wm = as_layout(p.w_user, w, p.forward.weights_desc(), stream, workspace);
    memory ym = as_layout(p.y_user, y, p.forward.dst_desc(), stream, workspace, false);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, xm},
        {DNNL_ARG_WEIGHTS, wm},
        {DNNL_ARG_DST, ym},
        {DNNL_ARG_SCRATCHPAD, workspace.buffer(p.forward.scratchpad_desc())}};
    if (s.has_bias)
      args.emplace(DNNL_ARG_BIAS, memory(p.b_user, cpu_engine(), const_cast<float*>(bias)));
    p.forward_op.execute(stream, args);
    copy_out(ym, p.y_user, y, stream);
    stream.wait();
  });
}

void dnnl_conv_backward_data(const ConvShape& s, const float* grad_y, const float* w,
                             float* grad_x) {
  guarded("convolution backward (data)", [&] {
    const auto& p = primitives_for(s);
    dnnl::stream stream(cpu_engine());
    Workspace workspace;
    memory gym = as_layout(p.y_user, grad_y, p.backward_data.diff_dst_desc(), stream, workspace);
    memory wm = as_layout(p.w_user, w, p.backward_data.weights_desc(), stream, workspace);
    memory gxm =
        as_layout(p.x_user, grad_x, p.backward_data.diff_src_desc(), stream, workspace, false);
    p.backward_data_op.execute(
        stream, {{DNNL_ARG_DIFF_DST, gym},
                 {DNNL_ARG_WEIGHTS, wm},
                 {DNNL_ARG_DIFF_SRC, gxm},
                 {DNNL_ARG_SCRATCHPAD, workspace.buffer(p.backward_data.scratchpad_desc())}});
    copy_out(gxm, p.x_user, grad_x, stream);
    stream.wait();
  });
}

void dnnl_conv_backward_weights(const ConvShape& s, const float* x, const float* grad_y,
                                float* grad_w, float* grad_bias) {
  guarded("convolution backward (weights)", [&] {
    const auto& p = primitives_for(s);
    dnnl::stream stream(cpu_engine());
    Workspace workspace;
    memory xm = as_layout(p.x_user, x, p.backward_weights.src_desc(), stream, workspace);
    memory gym = as_layout(p.y_user, grad_y, p.backward_weights.diff_dst_desc(), stream, workspace);
    memory gwm = as_layout(p.w_user, grad_w, p.backward_weights.diff_weights_desc(), stream,
                           workspace, false);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, xm},
        {DNNL_ARG_DIFF_DST, gym},
        {DNNL_ARG_DIFF_WEIGHTS, gwm},
        {DNNL_ARG_SCRATCHPAD, workspace.buffer(p.backward_weights.scratchpad_desc())}};
    if (s.has_bias) args.emplace(DNNL_ARG_DIFF_BIAS, memory(p.b_user, cpu_engine(), grad_bias));
    p.backward_weights_op.execute(stream, args);
    copy_out(gwm, p.w_user, grad_w, stream);
    stream.wait();
  });
}

}  // namespace pac::cpu
