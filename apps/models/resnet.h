// ResNets. CIFAR-style ResNet-20/32/56 (He et al. 2016, section 4.2): a 3x3 stem with 16
// channels, three stages of 16/32/64 channels, basic blocks, 1x1 projection shortcuts where the
// shape changes. ImageNet-style ResNet-18/34/50 as torchvision builds them (basic or bottleneck
// blocks, 7x7 stem and max-pool), with a small-input stem option (3x3, stride 1, no max-pool) for
// 28x28 and 32x32 images. Parameter names follow torchvision: conv1, bn1, layer1.0.conv1, ..., fc.
#pragma once

#include <string>

#include "layers/batch_norm.h"
#include "layers/conv2d.h"
#include "layers/linear.h"
#include "layers/sequential.h"

namespace pac::models {

struct ResNetConfig {
  std::string name = "resnet20";  // resnet20|resnet32|resnet56|resnet18|resnet34|resnet50
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  bool small_input = false;  // ImageNet-style only: 3x3 stride-1 stem without max-pool
};

bool is_resnet(const std::string& name);

class ResNet : public nn::Module {
 public:
  explicit ResNet(const ResNetConfig& config);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  ResNetConfig config_;
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<nn::Sequential>> stages_;
  std::shared_ptr<nn::Linear> fc_;
  bool max_pool_ = false;
};

}  // namespace pac::models
