#include "tests/fixtures.h"

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

namespace pac::testing {

const std::map<std::string, Tensor>& reference_tensors() {
  static const std::map<std::string, Tensor> tensors = [] {
    std::string path = std::string(PAC_FIXTURE_DIR) + "/reference.txt";
    std::ifstream in(path);
    PAC_CHECK(in.good(), "cannot open {}", path);
    std::map<std::string, Tensor> out;
    std::string header, values;
    while (std::getline(in, header) && std::getline(in, values)) {
      std::istringstream hs(header), vs(values);
      std::string name;
      int rank;
      hs >> name >> rank;
      Shape shape(rank);
      for (auto& d : shape) hs >> d;
      std::vector<float> data(shape_numel(shape));
      for (auto& v : data) vs >> v;
      PAC_CHECK(!vs.fail(), "{}: short value line for {}", path, name);
      out[name] = Tensor::from_vector(data, shape);
    }
    return out;
  }();
  return tensors;
}

Tensor fixture(const std::string& name) {
  auto it = reference_tensors().find(name);
  REQUIRE_MESSAGE(it != reference_tensors().end(), "no reference tensor " << name);
  return it->second.clone();
}

}  // namespace pac::testing
