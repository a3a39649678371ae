// A small MLP for sharding tests: odd shapes (rows not divisible by 2, 3 or 4, and some
// with fewer rows than ranks), a 0-d parameter, a parameter that never gets a gradient,
// and a block whose output is used twice. Knows nothing about sharding; every submodule
// is called through nn::call so that wrappers can hook any of them.
#pragma once

#include <torch/torch.h>

namespace fsdpp::models {

struct ToyBlockImpl : torch::nn::Module {
  ToyBlockImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(torch::Tensor x);  // x + fc_out(tanh(fc_in(x)))
  torch::nn::Linear fc_in{nullptr}, fc_out{nullptr};
  torch::nn::Linear unused{nullptr};  // registered, never called: receives no gradient
};
TORCH_MODULE(ToyBlock);

struct ToyMlpImpl : torch::nn::Module {
  // input 5 -> dim 7 -> blocks (hidden 3 and 9) -> output 3, times a learned scalar.
  ToyMlpImpl();
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Linear stem{nullptr}, head{nullptr};
  ToyBlock block1{nullptr}, block2{nullptr};
  torch::Tensor scale;  // 0-d
};
TORCH_MODULE(ToyMlp);

inline constexpr int64_t kToyMlpInput = 5;
inline constexpr int64_t kToyMlpOutput = 3;

}  // namespace fsdpp::models
