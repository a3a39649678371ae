// fsdpp's own CUDA kernels (core/kernels/) against the composite torch computation they
// replace, computed in fp64, under the tolerance policy (harness/oracle/tolerance.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>

#include "core/kernels/cross_entropy.h"
#include "core/runtime/device.h"
#include "harness/oracle/tolerance.h"
#include "harness/testing/multirank.h"
#include "suites/cuda/cuda_testing.h"

namespace fsdpp {
namespace {

at::Device first_gpu() { return at::Device(at::kCUDA, 0); }

// One shape of logits: rows x vocab values of `dtype`, each row `pad` values wider in
// memory than it is long (a row stride other than vocab).
struct CrossEntropyCase {
  int64_t rows, vocab, pad;
  at::ScalarType dtype;
};

// The loss and gradient of 0.5 * summed cross-entropy, fused and in fp64 (the composite
// cross_entropy(logits.double()) with ignore_index -100), on the same logits.
struct CrossEntropyRun {
  at::Tensor loss, grad, expected_loss, expected_grad;
};

CrossEntropyRun run_cross_entropy(const CrossEntropyCase& c) {
  torch::manual_seed(11);
  const auto on_gpu = torch::TensorOptions().device(first_gpu());
  // Logits spread like a trained model's (a few large, most near zero).
  const auto wide = (torch::randn({c.rows, c.vocab + c.pad}, on_gpu) * 4).to(c.dtype);
  const auto logits = wide.narrow(1, 0, c.vocab);
  auto targets = torch::randint(c.vocab, {c.rows}, on_gpu.dtype(at::kLong));
  targets.index_put_({torch::arange(0, c.rows, 3, on_gpu.dtype(at::kLong))}, -100);  // every third row ignored

  CrossEntropyRun run;
  auto x = logits.detach().requires_grad_();
  auto loss = kernels::fused_summed_cross_entropy(x, targets);
  (loss * 0.5).backward();
  run.loss = loss.detach();
  run.grad = x.grad();

  auto x64 = logits.to(at::kDouble).detach().requires_grad_();
  auto expected = torch::nn::functional::cross_entropy(
      x64, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(-100));
  (expected * 0.5).backward();
  run.expected_loss = expected.detach();
  run.expected_grad = x64.grad();
  return run;
}

// The fused kernels compute in fp32 from logits in their own dtype and round the gradient
// once: the loss is held to the fp32 policy, the gradient to its dtype's. Cases take the
// 16-byte path (rows and strides multiples of 16 bytes: vocab 1000, Llama 3's 128,256)
// and the one-value path (vocab 1001, a row stride of 1003), with ignored rows in each.
TEST(CudaKernels, FusedCrossEntropyMatchesTheFp64CompositeInLossAndGradient) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(1, [](harness::RankContext&) {
    runtime::set_current_device(first_gpu());
    const CrossEntropyCase cases[] = {{37, 1000, 0, at::kBFloat16}, {37, 1000, 8, at::kFloat},
                                      {37, 1001, 0, at::kBFloat16}, {29, 1001, 2, at::kFloat},
                                      {29, 4099, 0, at::kHalf},     {5, 128256, 0, at::kBFloat16}};
    for (const auto& c : cases) {
      SCOPED_TRACE(std::to_string(c.rows) + " x " + std::to_string(c.vocab) + " (+" + std::to_string(c.pad) + ") " +
                   c10::toString(c.dtype));
      ASSERT_TRUE(kernels::has_fused_cross_entropy(torch::zeros({2, 3}, torch::TensorOptions().device(first_gpu()))));
      const auto run = run_cross_entropy(c);
      EXPECT_EQ(run.loss.scalar_type(), at::kFloat);
      EXPECT_EQ(run.grad.scalar_type(), c.dtype);
      const auto loss = harness::compare(run.loss.cpu(), run.expected_loss.to(at::kFloat).cpu());
      EXPECT_TRUE(loss.ok) << run.loss.item<double>() << " vs " << run.expected_loss.item<double>() << ": "
                           << loss.describe();
      const auto grad = harness::compare(run.grad.cpu(), run.expected_grad.to(c.dtype).cpu());
      EXPECT_TRUE(grad.ok) << grad.describe();
      // Ignored rows: exactly zero gradient.
      EXPECT_EQ(run.grad.narrow(0, 0, 1).abs().max().item<double>(), 0.0);
    }
  });
}

// A target that names no class gives a NaN loss and gradient for its row (the composite
// stops the process with a device-side assert); rows beside it are unaffected.
TEST(CudaKernels, FusedCrossEntropyMarksATargetOutsideTheVocabularyWithNaN) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(1, [](harness::RankContext&) {
    runtime::set_current_device(first_gpu());
    const auto on_gpu = torch::TensorOptions().device(first_gpu());
    auto x = torch::randn({3, 64}, on_gpu).requires_grad_();
    const auto targets = torch::tensor({5, 64, 7}, on_gpu.dtype(at::kLong));
    auto loss = kernels::fused_summed_cross_entropy(x, targets);
    loss.backward();
    EXPECT_TRUE(std::isnan(loss.item<double>()));
    EXPECT_TRUE(x.grad()[1].isnan().all().item<bool>());
    EXPECT_FALSE(x.grad()[0].isnan().any().item<bool>());
    EXPECT_FALSE(x.grad()[2].isnan().any().item<bool>());
  });
}

}  // namespace
}  // namespace fsdpp
