// Model construction: parameter counts equal the PyTorch/torchvision networks of the same
// configuration, forward shapes, and the overfitting sanity check.
#include <doctest/doctest.h>

#include "apps/models/registry.h"
#include "core/autograd.h"
#include "core/ops.h"

using namespace pac;
using models::ModelConfig;

TEST_CASE("parameter counts match PyTorch and torchvision") {
  CHECK(models::make_model({"resnet20", 1, 10})->num_parameters() == 272186);
  CHECK(models::make_model({"resnet32", 3, 10})->num_parameters() == 466906);
  CHECK(models::make_model({"resnet56", 3, 10})->num_parameters() == 855770);
  CHECK(models::make_model({"resnet18", 3, 1000})->num_parameters() == 11689512);
  CHECK(models::make_model({"resnet34", 3, 1000})->num_parameters() == 21797672);
  CHECK(models::make_model({"resnet50", 3, 1000})->num_parameters() == 25557032);
  ModelConfig vit{"vit", 3, 10, 28};
  vit.patch = 4;
  CHECK(models::make_model(vit)->num_parameters() == 4767242);
  ModelConfig vit_b{"vit-base", 3, 1000, 224};
  vit_b.patch = 16;
  CHECK(models::make_model(vit_b)->num_parameters() == 86567656);
}

TEST_CASE("parameter names follow torchvision's layout") {
  auto model = models::make_model({"resnet18", 3, 10});
  auto named = model->named_parameters();
  CHECK(named.front().first == "conv1.weight");
  CHECK(named.back().first == "fc.bias");
  bool found = false;
  for (auto& [name, p] : named) found |= name == "layer2.0.downsample.0.weight";
  CHECK(found);
  CHECK(model->named_buffers().front().first == "bn1.running_mean");
}

TEST_CASE("forward shapes for small inputs") {
  NoGradGuard no_grad;
  for (const char* name : {"resnet20", "resnet18", "resnet50"}) {
    ModelConfig c{name, 1, 10, 28, true};
    auto model = models::make_model(c);
    model->eval();
    CHECK((*model)(Tensor::zeros({2, 1, 28, 28})).shape() == Shape{2, 10});
  }
  ModelConfig vit{"vit-tiny", 1, 10, 28};
  vit.depth = 2;
  CHECK((*models::make_model(vit))(Tensor::zeros({2, 1, 28, 28})).shape() == Shape{2, 10});
}

TEST_CASE("unknown model names and wrong inputs are clear errors") {
  CHECK_THROWS_WITH_AS(models::make_model({"resnet21"}),
                       doctest::Contains("unknown model 'resnet21'"), Error);
  auto model = models::make_model({"resnet20", 1, 10});
  CHECK_THROWS_WITH_AS((*model)(Tensor::zeros({2, 3, 28, 28})),
                       doctest::Contains("input must be [N, 1, H, W]"), Error);
  ModelConfig vit{"vit", 1, 10, 30};
  CHECK_THROWS_WITH_AS(models::make_model(vit), doctest::Contains("multiple of the patch size"),
                       Error);
}

TEST_CASE("the summary lists layers with output shapes and ends with the total") {
  auto model = models::make_model({"resnet20", 1, 10});
  std::string s = model->summary({1, 1, 28, 28});
  CHECK(s.find("layer3.2.conv2") != std::string::npos);
  CHECK(s.find("[1, 64, 7, 7]") != std::string::npos);
  CHECK(s.find("total parameters: 272186") != std::string::npos);
}
