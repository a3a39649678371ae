#include "core/models/toy_mlp.h"

#include "core/nn/module_hooks.h"

namespace fsdpp::models {

ToyBlockImpl::ToyBlockImpl(int64_t dim, int64_t hidden) {
  fc_in = register_module("fc_in", torch::nn::Linear(dim, hidden));
  fc_out = register_module("fc_out", torch::nn::Linear(hidden, dim));
  unused = register_module("unused", torch::nn::Linear(2, 2));
}

torch::Tensor ToyBlockImpl::forward(torch::Tensor x) { return x + nn::call(fc_out, torch::tanh(nn::call(fc_in, x))); }

ToyMlpImpl::ToyMlpImpl() {
  stem = register_module("stem", torch::nn::Linear(kToyMlpInput, 7));
  block1 = register_module("block1", ToyBlock(7, 3));
  block2 = register_module("block2", ToyBlock(7, 9));
  head = register_module("head", torch::nn::Linear(7, kToyMlpOutput));
  scale = register_parameter("scale", torch::ones({}));
}

torch::Tensor ToyMlpImpl::forward(torch::Tensor x) {
  auto h = nn::call(stem, x);
  auto y = nn::call(block1, h);
  auto z = y + 0.5 * nn::call(block2, y);  // block1's output is used twice
  return nn::call(head, z) * scale;
}

}  // namespace fsdpp::models
