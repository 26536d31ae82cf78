// The oneDNN entry points of a build without oneDNN (-DPAC_DNNL=OFF): core/ops/conv.cpp never
// selects them there, but it still names them, so they must exist.
#include "core/cpu/dnnl_conv.h"
#include "core/error.h"

namespace pac::cpu {

namespace {
[[noreturn]] void missing() {
  PAC_FAIL("this build has no oneDNN convolution (configured with -DPAC_DNNL=OFF)");
}
}  // namespace

void dnnl_conv_forward(const ConvShape&, const float*, const float*, const float*, float*) {
  missing();
}
void dnnl_conv_backward_data(const ConvShape&, const float*, const float*, float*) { missing(); }
void dnnl_conv_backward_weights(const ConvShape&, const float*, const float*, float*, float*) {
  missing();
}

}  // namespace pac::cpu
