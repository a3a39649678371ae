// FusedAdamW's host route (core/optim/adamw_kernel.h): fp32 CPU parameters step with
// fsdpp's fused kernel, within fp32 round-off of torch::optim::AdamW, with the same bits
// on any thread count and on either ISA path, and with torch's state layout.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/compat/torch_compat.h"
#include "core/optim/adamw.h"
#include "core/optim/adamw_kernel.h"

namespace fsdpp::optim {
namespace {

// Two parameters (decayed matrix, undecayed bias) whose sizes leave partial 8-lane tails
// and span several 32768-element pieces of the threaded split.
struct Params {
  at::Tensor w, b;
  std::vector<std::pair<std::string, at::Tensor>> named() const { return {{"w", w}, {"b", b}}; }
};

Params make_params(at::ScalarType dtype = at::kFloat) {
  torch::manual_seed(11);
  return {torch::randn({301, 257}, torch::dtype(dtype)).requires_grad_(),
          torch::randn({1003}, torch::dtype(dtype)).requires_grad_()};
}

Params clone(const Params& p) { return {p.w.detach().clone().requires_grad_(), p.b.detach().clone().requires_grad_()}; }

const AdamWSettings kSettings{1e-2, 0.9, 0.95, 1e-8, 0.1};

// Steps `opt` over `steps` seeded gradient draws (the same draws for every caller).
void train(torch::optim::AdamW& opt, const Params& p, int steps) {
  torch::manual_seed(12);
  for (int i = 0; i < steps; ++i) {
    p.w.mutable_grad() = torch::randn(p.w.sizes(), p.w.options().requires_grad(false)) * (i + 1);
    p.b.mutable_grad() = torch::randn(p.b.sizes(), p.b.options().requires_grad(false)) * 1e-3;
    opt.step();
  }
}

// A copy of `init` trained for `steps` by FusedAdamW (fused) or torch::optim::AdamW.
struct Trained {
  Params params;
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

Trained trained(const Params& init, bool fused, int steps) {
  auto settings = kSettings;
  settings.fused = fused;
  Trained t{clone(init), nullptr};
  t.optimizer = make_adamw(t.params.named(), settings);
  train(*t.optimizer, t.params, steps);
  return t;
}

const torch::optim::AdamWParamState& state_of(torch::optim::AdamW& opt, const at::Tensor& p) {
  return static_cast<const torch::optim::AdamWParamState&>(
      *opt.state().at(compat::optimizer_state_key(opt.state(), p)));
}

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(at::get_num_threads()) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(HostFusedAdamW, StepsLikeTorchAdamWWithinFp32RoundOffAndKeepsTorchsState) {
  const auto init = make_params();
  auto fused = trained(init, true, 20), reference = trained(init, false, 20);
  EXPECT_STREQ(step_implementation(*fused.optimizer), "fused-cpu");
  EXPECT_STREQ(step_implementation(*reference.optimizer), "per-tensor");
  const auto &fp = fused.params, &tp = reference.params;
  // PyTorch's assert_close defaults for fp32 (suites' tolerance policy): rtol 1.3e-6, atol 1e-5.
  EXPECT_TRUE(torch::allclose(fp.w, tp.w, 1.3e-6, 1e-5));
  EXPECT_TRUE(torch::allclose(fp.b, tp.b, 1.3e-6, 1e-5));
  EXPECT_FALSE(torch::equal(fp.w, init.w));  // it did step
  for (const auto& [f, t] : {std::pair{fp.w, tp.w}, std::pair{fp.b, tp.b}}) {
    const auto &fs = state_of(*fused.optimizer, f), &ts = state_of(*reference.optimizer, t);
    EXPECT_EQ(fs.step(), 20);
    EXPECT_EQ(fs.step(), ts.step());
    EXPECT_TRUE(torch::allclose(fs.exp_avg(), ts.exp_avg(), 1.3e-6, 1e-5));
    EXPECT_TRUE(torch::allclose(fs.exp_avg_sq(), ts.exp_avg_sq(), 1.3e-6, 1e-5));
  }
}

TEST(HostFusedAdamW, GivesTheSameBitsOnOneTwoAndThreeThreads) {
  const auto init = make_params();
  std::vector<Params> results;
  for (int threads : {1, 2, 3}) {
    ThreadCount guard(threads);
    results.push_back(trained(init, true, 5).params);
  }
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_TRUE(torch::equal(results[0].w, results[i].w)) << "threads " << i + 1;
    EXPECT_TRUE(torch::equal(results[0].b, results[i].b)) << "threads " << i + 1;
  }
}

// The name of the kernel steps run through: the vector one exactly when the CPU has AVX2
// (asked of the CPU through the compiler's builtin).
TEST(HostFusedAdamW, TheKernelIsTheVectorOneExactlyWhenTheCpuHasAvx2) {
#if defined(__x86_64__)
  EXPECT_EQ(std::string(adamw_kernel_isa()), __builtin_cpu_supports("avx2") ? "avx2" : "generic");
#else
  EXPECT_EQ(std::string(adamw_kernel_isa()), "generic");
#endif
}

// Both paths step exactly their n elements: the element after the range, in every buffer,
// keeps its bits (n with a vector tail and without).
TEST(HostFusedAdamW, BothPathsWriteOnlyTheirRange) {
  const auto c = adamw_step_constants(3e-3, 0.9, 0.999, 1e-8, 0.1, 2);
  for (bool generic : {true, false})
    for (int64_t n : {8, 11}) {
      torch::manual_seed(6);
      auto p = torch::randn({n + 1}), g = torch::randn({n + 1}), m = torch::randn({n + 1}), v = torch::rand({n + 1});
      const auto p0 = p.clone(), m0 = m.clone(), v0 = v.clone();
      adamw_step_range(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n, c,
                       generic);
      EXPECT_TRUE(torch::equal(p[n], p0[n])) << "generic " << generic << " n " << n;
      EXPECT_TRUE(torch::equal(m[n], m0[n])) << "generic " << generic << " n " << n;
      EXPECT_TRUE(torch::equal(v[n], v0[n])) << "generic " << generic << " n " << n;
      EXPECT_FALSE(torch::equal(p.narrow(0, 0, n), p0.narrow(0, 0, n))) << "the range itself was stepped";
    }
}

TEST(HostFusedAdamW, VectorAndPortablePathsGiveTheSameBits) {
  // Without AVX2 both calls below run the portable path: the comparison would hold trivially.
  if (std::string(adamw_kernel_isa()) != "avx2") GTEST_SKIP() << "no vector path on this CPU";
  torch::manual_seed(5);
  const int64_t n = 1000;  // 125 lanes of 8 and no tail; the +3 below adds a tail
  for (int64_t numel : {n, n + 3}) {
    auto p = torch::randn({numel}), g = torch::randn({numel}), m = torch::randn({numel}) * 0.1,
         v = torch::rand({numel}) * 0.01;
    auto p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
    const auto c = adamw_step_constants(3e-3, 0.9, 0.999, 1e-8, 0.1, 7);
    adamw_step_range(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), numel, c);
    adamw_step_range(p2.data_ptr<float>(), g.data_ptr<float>(), m2.data_ptr<float>(), v2.data_ptr<float>(), numel, c,
                     /*force_generic=*/true);
    EXPECT_TRUE(torch::equal(p, p2)) << adamw_kernel_isa();
    EXPECT_TRUE(torch::equal(m, m2));
    EXPECT_TRUE(torch::equal(v, v2));
  }
}

TEST(HostFusedAdamW, OneElementFollowsTheFormulaWithBiasCorrection) {
  // Step 3 from m = 0.5, v = 0.04 with g = 2: every quantity by hand, in double.
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.01;
  float p = 1.0f, g = 2.0f, m = 0.5f, v = 0.04f;
  adamw_step_range(&p, &g, &m, &v, 1, adamw_step_constants(lr, b1, b2, eps, wd, 3));
  const double m_ref = 0.9 * 0.5 + 0.1 * 2, v_ref = 0.99 * 0.04 + 0.01 * 4;
  const double bc1 = 1 - std::pow(b1, 3), bc2 = 1 - std::pow(b2, 3);
  const double p_ref = 1.0 * (1 - lr * wd) - lr / bc1 * m_ref / (std::sqrt(v_ref) / std::sqrt(bc2) + eps);
  EXPECT_NEAR(m, m_ref, 1e-6);
  EXPECT_NEAR(v, v_ref, 1e-7);
  EXPECT_NEAR(p, p_ref, 2e-6);
}

// A parameter whose state holds one tensor the kernel cannot read (exp_avg in fp64, as a
// checkpoint of another optimizer might leave it) takes torch's own step, bit for bit,
// however dense its other state tensor is.
TEST(HostFusedAdamW, AParameterWithOneStateTensorNoRouteTakesStepsAsTorchDoes) {
  const auto init = make_params();
  auto fused = trained(init, true, 1), reference = trained(init, false, 1);
  auto& f = const_cast<torch::optim::AdamWParamState&>(state_of(*fused.optimizer, fused.params.w));
  auto& r = const_cast<torch::optim::AdamWParamState&>(state_of(*reference.optimizer, reference.params.w));
  {
    torch::NoGradGuard no_grad;
    reference.params.w.copy_(fused.params.w);
  }
  f.exp_avg(f.exp_avg().to(at::kDouble));
  r.exp_avg(f.exp_avg().clone());
  r.exp_avg_sq(f.exp_avg_sq().clone());
  ASSERT_EQ(f.step(), r.step());
  torch::manual_seed(13);
  const auto g = torch::randn(init.w.sizes());
  for (auto* t : {&fused, &reference}) {
    t->params.w.mutable_grad() = g.clone();
    t->params.b.mutable_grad() = at::Tensor();  // b is not stepped
    t->optimizer->step();
  }
  EXPECT_TRUE(torch::equal(fused.params.w, reference.params.w));
}

TEST(HostFusedAdamW, ATensorNeitherRouteTakesMakesTheWholeStepTorchsOwnBitForBit) {
  // fp64 parameters: no fused route; the step must be torch::optim::AdamW's exactly.
  const auto init = make_params(at::kDouble);
  auto fused = trained(init, true, 3), reference = trained(init, false, 3);
  EXPECT_STREQ(step_implementation(*fused.optimizer), "per-tensor");
  EXPECT_TRUE(torch::equal(fused.params.w, reference.params.w));
  EXPECT_TRUE(torch::equal(fused.params.b, reference.params.b));
}

}  // namespace
}  // namespace fsdpp::optim
