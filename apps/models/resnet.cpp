#include "apps/models/resnet.h"

#include <map>

#include "core/autograd.h"
#include "core/ops.h"
#include "layers/init.h"

namespace pac::models {

namespace {

struct Layout {
  bool cifar;       // 3 stages of 16/32/64 channels, else 4 of 64/128/256/512
  bool bottleneck;  // 1x1-3x3-1x1 blocks with expansion 4
  std::vector<int64_t> blocks;
};

const std::map<std::string, Layout>& layouts() {
  static const std::map<std::string, Layout> table = {
      {"resnet20", {true, false, {3, 3, 3}}},     {"resnet32", {true, false, {5, 5, 5}}},
      {"resnet56", {true, false, {9, 9, 9}}},     {"resnet18", {false, false, {2, 2, 2, 2}}},
      {"resnet34", {false, false, {3, 4, 6, 3}}}, {"resnet50", {false, true, {3, 4, 6, 3}}},
  };
  return table;
}

// The shortcut where a block changes the shape: a strided 1x1 convolution and batch norm.
std::shared_ptr<nn::Sequential> projection(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(in, out, 1, stride, 0, false),
      std::make_shared<nn::BatchNorm2d>(out)});
}

// conv - bn - relu - conv - bn, plus the shortcut, then relu.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(in, out, 3, stride, 1, false));
    bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
    conv2_ = register_module("conv2", std::make_shared<nn::Conv2d>(out, out, 3, 1, 1, false));
    bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out)
      downsample_ = register_module("downsample", projection(in, out, stride));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*bn1_)((*conv1_)(x)));
    h = (*bn2_)((*conv2_)(h));
    return relu(add(h, downsample_ ? (*downsample_)(x) : x));
  }
  std::string describe() const override { return "BasicBlock"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Sequential> downsample_;
};

// 1x1 reduce - 3x3 (carries the stride, as torchvision v1.5) - 1x1 expand, plus the shortcut.
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t expansion = 4;
  Bottleneck(int64_t in, int64_t width, int64_t stride) {
    int64_t out = width * expansion;
    conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(in, width, 1, 1, 0, false));
    bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(width));
    conv2_ =
        register_module("conv2", std::make_shared<nn::Conv2d>(width, width, 3, stride, 1, false));
    bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(width));
    conv3_ = register_module("conv3", std::make_shared<nn::Conv2d>(width, out, 1, 1, 0, false));
    bn3_ = register_module("bn3", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out)
      downsample_ = register_module("downsample", projection(in, out, stride));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*bn1_)((*conv1_)(x)));
    h = relu((*bn2_)((*conv2_)(h)));
    h = (*bn3_)((*conv3_)(h));
    return relu(add(h, downsample_ ? (*downsample_)(x) : x));
  }
  std::string describe() const override { return "Bottleneck"; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<nn::Sequential> downsample_;
};

}  // namespace

bool is_resnet(const std::string& name) { return layouts().count(name) > 0; }

ResNet::ResNet(const ResNetConfig& config) : config_(config) {
  auto it = layouts().find(config.name);
  PAC_CHECK(it != layouts().end(),
            "ResNet: unknown model '{}'; expected resnet20, resnet32, "
            "resnet56, resnet18, resnet34 or resnet50",
            config.name);
  PAC_CHECK(config.in_channels > 0 && config.num_classes > 0,
            "ResNet: in_channels and num_classes must be positive, got {} and {}",
            config.in_channels, config.num_classes);
  const Layout& layout = it->second;
  int64_t width = layout.cifar ? 16 : 64;
  if (layout.cifar || config.small_input) {
    conv1_ = register_module(
        "conv1", std::make_shared<nn::Conv2d>(config.in_channels, width, 3, 1, 1, false));
  } else {
    conv1_ = register_module(
        "conv1", std::make_shared<nn::Conv2d>(config.in_channels, width, 7, 2, 3, false));
    max_pool_ = true;
  }
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(width));
  int64_t in = width;
  for (size_t s = 0; s < layout.blocks.size(); ++s) {
    int64_t stage_width = width << s;
    auto stage = std::make_shared<nn::Sequential>();
    for (int64_t b = 0; b < layout.blocks[s]; ++b) {
      int64_t stride = (b == 0 && s > 0) ? 2 : 1;
      if (layout.bottleneck) {
        stage->append(std::make_shared<Bottleneck>(in, stage_width, stride));
        in = stage_width * Bottleneck::expansion;
      } else {
        stage->append(std::make_shared<BasicBlock>(in, stage_width, stride));
        in = stage_width;
      }
    }
    stages_.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  fc_ = register_module("fc", std::make_shared<nn::Linear>(in, config.num_classes));

  // torchvision's initialisation: He-normal (fan-out) convolutions, BN weight 1 and bias 0.
  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) {
    if (p->shape().size() == 4) {
      int64_t fan_out = p->shape()[0] * p->shape()[2] * p->shape()[3];
      Tensor data = p->data();
      data.copy_(nn::init::kaiming_normal_fan_out(p->shape(), fan_out, default_generator()));
    }
  }
}

Tensor ResNet::forward(const Tensor& x) {
  PAC_CHECK(x.dim() == 4 && x.size(1) == config_.in_channels,
            "{}: input must be [N, {}, H, W], got {}", config_.name, config_.in_channels, x.str());
  Tensor h = relu((*bn1_)((*conv1_)(x)));
  if (max_pool_) h = max_pool2d(h, 3, 2, 1);
  for (auto& stage : stages_) h = (*stage)(h);
  h = adaptive_avg_pool2d(h, 1, 1);
  return (*fc_)(reshape(h, {h.size(0), h.size(1)}));
}

std::string ResNet::describe() const {
  return fmt::format("{}(in_channels={}, num_classes={}{})", config_.name, config_.in_channels,
                     config_.num_classes, config_.small_input ? ", small_input" : "");
}

}  // namespace pac::models
