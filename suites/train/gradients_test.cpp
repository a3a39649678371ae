// Gradient norms and clipping (core/optim/gradients.h) agree with LibTorch's
// clip_grad_norm_ within fp32 round-off for every norm type, and clearing leaves no
// gradient, so that AdamW skips a parameter the next backward does not reach.
#include "core/optim/gradients.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "core/optim/adamw.h"

namespace fsdpp::optim {
namespace {

std::vector<at::Tensor> parameters_with_gradients(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> params;
  for (auto shape : std::vector<std::vector<int64_t>>{{7, 5}, {5}, {3, 4, 2}, {1}})
    params.push_back(torch::randn(shape, torch::requires_grad()));
  for (auto& p : params) p.mutable_grad() = torch::randn(p.sizes()) * 3;
  params.push_back(torch::randn({2}, torch::requires_grad()));  // no gradient: skipped
  return params;
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const auto& p : params) {
    out.push_back(p.detach().clone().requires_grad_());
    if (p.grad().defined()) out.back().mutable_grad() = p.grad().clone();
  }
  return out;
}

TEST(Gradients, ClipGradNormMatchesLibTorchsForEveryNormType) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double norm_type : {1.0, 2.0, 3.0, inf})
    for (double max_norm : {0.5, 1e6}) {  // clipped, and left alone
      auto ours = parameters_with_gradients(11), theirs = copies(ours);
      const double total = clip_grad_norm(ours, max_norm, norm_type);
      const double expected = torch::nn::utils::clip_grad_norm_(theirs, max_norm, norm_type);
      EXPECT_NEAR(total, expected, 1.3e-6 * expected) << "p=" << norm_type;
      for (size_t i = 0; i < ours.size(); ++i) {
        ASSERT_EQ(ours[i].grad().defined(), theirs[i].grad().defined());
        if (ours[i].grad().defined()) {
          EXPECT_TRUE(torch::allclose(ours[i].grad(), theirs[i].grad(), 1.3e-6, 1e-5))
              << "p=" << norm_type << " max_norm=" << max_norm << " tensor " << i;
        }
      }
      if (max_norm > total) {  // coef >= 1: the gradients are untouched, bit for bit
        auto fresh = parameters_with_gradients(11);
        for (size_t i = 0; i + 1 < ours.size(); ++i) EXPECT_TRUE(torch::equal(ours[i].grad(), fresh[i].grad()));
      }
    }
}

TEST(Gradients, PowerSumIsTheSumOfEachTensorsNormToThePower) {
  auto a = torch::tensor({3.0f, -4.0f}), b = torch::tensor({1.0f, 2.0f, -2.0f});
  EXPECT_NEAR(gradient_power_sum({a, b}, 2.0), 25.0 + 9.0, 1e-9);
  EXPECT_NEAR(gradient_power_sum({a, b, at::Tensor(), torch::empty({0})}, 1.0), 7.0 + 5.0, 1e-9);
  EXPECT_EQ(gradient_power_sum({a, b}, std::numeric_limits<double>::infinity()), 4.0);
  // Mixed dtypes take one call each; the sum is still over every tensor.
  EXPECT_NEAR(gradient_power_sum({a, b.to(torch::kDouble)}, 2.0), 34.0, 1e-9);
  EXPECT_EQ(gradient_power_sum({}, 2.0), 0.0);
  EXPECT_THROW(gradient_power_sum({a}, 0.0), std::invalid_argument);
}

// Large fp32 host tensors (several of fsdpp's 32768-value pieces, tails not a multiple of
// four), the kind an offloaded shard's gradients are.
std::vector<at::Tensor> large_host_gradients() {
  torch::manual_seed(5);
  std::vector<at::Tensor> grads;
  for (int64_t n : {int64_t{100003}, int64_t{32768}, int64_t{7}, int64_t{65537}})
    grads.push_back(torch::randn({n}) * 3);
  return grads;
}

TEST(Gradients, HostTwoNormsAreFp32RoundingsOfTheFp64NormsOnAnyThreadCount) {
  const auto grads = large_host_gradients();
  double truth = 0, foreach_sum = 0;  // fp64 ground truth; LibTorch's _foreach_norm as clip_grad_norm_ takes it
  for (const auto& g : grads) truth += g.to(at::kDouble).pow(2).sum().item<double>();
  for (const auto& n : at::_foreach_norm(grads, 2.0)) foreach_sum += std::pow(n.item<double>(), 2);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const double one = gradient_power_sum(grads, 2.0);
  at::set_num_threads(3);
  const double three = gradient_power_sum(grads, 2.0);
  at::set_num_threads(threads);
  EXPECT_EQ(one, three);  // pieces are summed in order, whichever thread ran them
  // Each norm is the fp64 one rounded to fp32 (2^-24 relative), squared: 2^-23 at most.
  EXPECT_NEAR(one, truth, std::ldexp(1.0, -23) * truth);
  EXPECT_NEAR(foreach_sum, truth, 1.3e-6 * truth);  // the fp32 policy's rtol (harness/oracle/tolerance.h)
}

TEST(Gradients, HostClippingMultipliesLikeForeachMulBitwise) {
  auto ours = large_host_gradients(), theirs = large_host_gradients();
  const double total = std::sqrt(gradient_power_sum(ours, 2.0));
  clip_gradients(ours, total, 0.37);
  at::_foreach_mul_(theirs, 0.37 / (total + 1e-6));
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_TRUE(torch::equal(ours[i], theirs[i])) << "tensor " << i;
}

TEST(Gradients, ClearingLeavesNoGradientSoAdamWSkipsAParameterWithoutOne) {
  auto used = torch::ones({2, 2}, torch::requires_grad()), unused = torch::ones({2, 2}, torch::requires_grad());
  auto opt = make_adamw({{"used", used}, {"unused", unused}}, AdamWSettings{0.1, 0.9, 0.999, 1e-8, 0.5});
  (used * unused).sum().backward();  // both get a gradient in the first step
  opt->step();
  clear_gradients(*opt);
  EXPECT_FALSE(used.grad().defined());
  EXPECT_FALSE(unused.grad().defined());
  const auto before = unused.detach().clone();
  (used * 2).sum().backward();  // the second reaches only `used`
  opt->step();
  // A zero-filled gradient (1.13's zero_grad) would have decayed `unused` and moved it by
  // its first moment; without one AdamW leaves it as it was.
  EXPECT_TRUE(torch::equal(unused, before));
  EXPECT_TRUE(torch::equal(used.grad(), torch::full({2, 2}, 2.0f)));  // taken as is, not added to zeros
}

}  // namespace
}  // namespace fsdpp::optim
