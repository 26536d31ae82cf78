#include "core/autograd.h"

#include <atomic>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/ops.h"

namespace pac {

static std::atomic<uint64_t> next_sequence_nr{0};
Node::Node() : sequence_nr(next_sequence_nr++) {}

static thread_local bool grad_mode_enabled = true;
bool GradMode::enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

// The sink of a leaf: sums the incoming gradient into leaf.grad (or hands it to the leaf's own
// GradSink), then fires the leaf's grad-ready hooks. The engine runs it once per backward, after
// every contribution has arrived, and before any other ready node: it is made once, in the first
// forward pass that uses the leaf, so by creation order it would wait behind every node of every
// later graph, and a parameter's grad-ready hook would fire only when all of backward was done,
// leaving a DDP reducer nothing to overlap its all-reduces with.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {
    sequence_nr = std::numeric_limits<uint64_t>::max();
  }
  std::string name() const override { return "AccumulateGrad"; }

  std::vector<Tensor> apply(const Tensor& grad_output) override {
    std::shared_ptr<TensorImpl> leaf = leaf_.lock();
    if (!leaf) return {};
    Tensor leaf_tensor(leaf);
    PAC_CHECK(grad_output.shape() == leaf->shape,
              "autograd: gradient {} does not match its leaf {}", grad_output.str(),
              leaf_tensor.str());
    Tensor grad;
    if (leaf->grad_sink) {
      grad = leaf->grad_sink(grad_output);
    } else if (!leaf->grad) {
      MemoryTagScope tag(MemoryTag::gradients);
      leaf->grad = grad_output.clone().impl_ptr();
      grad = Tensor(leaf->grad);
    } else {
      // In place, so a gradient that is a view into a bucket stays that view.
      grad = Tensor(leaf->grad);
      add_(grad, grad_output);
    }
    for (auto& hook : leaf->grad_ready_hooks) hook(grad);
    return {};
  }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

static std::shared_ptr<Node> gradient_edge(const Tensor& input) {
  if (!input.defined() || !input.requires_grad()) return nullptr;
  TensorImpl* impl = input.impl();
  if (impl->grad_fn) return impl->grad_fn;
  if (!impl->grad_accumulator) {
    impl->grad_accumulator = std::make_shared<AccumulateGrad>(input.impl_ptr());
  }
  return impl->grad_accumulator;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

void attach_grad_fn(Tensor& output, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs) {
  node->next.clear();
  for (const Tensor& input : inputs) node->next.push_back(gradient_edge(input));
  output.impl()->requires_grad = true;
  output.impl()->grad_fn = std::move(node);
}

void run_backward(const Tensor& root, const Tensor& grad_output) {
  PAC_CHECK(root.requires_grad(),
            "backward: {} does not require grad (no input of the graph requires grad)", root.str());
  Tensor seed = grad_output;
  if (!seed.defined()) {
    PAC_CHECK(root.numel() == 1,
              "backward: a gradient can be implied only for single-element outputs, got {}; pass "
              "grad_output",
              root.str());
    seed = Tensor::ones(root.shape(), root.device());
  }
  PAC_CHECK(seed.shape() == root.shape(), "backward: grad_output {} does not match output {}",
            seed.str(), root.str());
  std::shared_ptr<Node> start = gradient_edge(root);

  // Count, for every node, how many edges of this graph lead into it.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_set<Node*> seen{start.get()};
  std::vector<Node*> stack{start.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const auto& next : node->next) {
      if (!next) continue;
      ++dependencies[next.get()];
      if (seen.insert(next.get()).second) stack.push_back(next.get());
    }
  }

  NoGradGuard no_grad;
  std::unordered_map<Node*, Tensor> pending{{start.get(), seed}};
  std::priority_queue<std::pair<uint64_t, Node*>> ready;
  ready.push({start->sequence_nr, start.get()});
  while (!ready.empty()) {
    Node* node = ready.top().second;
    ready.pop();
    Tensor grad = std::move(pending[node]);
    pending.erase(node);
    std::vector<Tensor> input_grads = node->apply(grad);
    for (size_t i = 0; i < node->next.size(); ++i) {
      Node* next = node->next[i].get();
      if (!next) continue;
      PAC_CHECK(i < input_grads.size() && input_grads[i].defined(),
                "autograd: {} returned no gradient for its input {}", node->name(), i);
      auto it = pending.find(next);
      if (it == pending.end()) {
        pending.emplace(next, input_grads[i]);
      } else {
        PAC_CHECK(it->second.shape() == input_grads[i].shape(),
                  "autograd: gradients {} and {} flowing into {} differ in shape", it->second.str(),
                  input_grads[i].str(), next->name());
        it->second = add(it->second, input_grads[i]);
      }
      if (--dependencies[next] == 0) ready.push({next->sequence_nr, next});
    }
  }
}

}  // namespace pac
