// The CUDA path: NCCL collectives with stream semantics, ranks sharing one GPU through
// host-staged Gloo, FSDP on CUDA against the unsharded CUDA reference (fp32 and bf16),
// caching-allocator telemetry, SDPA, pinned offload, the fused AdamW step, foreach gradient
// norms, rotary tables, the profiler's kernel trace and the host AdamW kernel under
// offload. Every test needs a GPU and says so when skipped (CPU builds, machines without
// one); multi-rank NCCL needs one GPU per rank.
//
// The parent test process never touches CUDA before run_ranks forks (a CUDA context does
// not survive fork), so whether a GPU exists is read from /dev/nvidia*, and CUDA itself is
// only used inside the ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "core/comm/communicator.h"
#include "core/compat/torch_compat.h"
#include "core/fsdp/sharded_model.h"
#include "core/models/attention.h"
#include "core/models/layers.h"
#include "core/models/llama.h"
#include "core/models/rotary.h"
#include "core/optim/adamw.h"
#include "core/optim/fused_adamw.h"
#include "core/optim/gradients.h"
#include "core/runtime/device.h"
#include "core/train/train_step.h"
#include "harness/bench/step_profiler.h"
#include "harness/oracle/tolerance.h"
#include "harness/results/op_profile.h"
#include "harness/testing/equivalence_check.h"
#include "harness/testing/multirank.h"
#include "harness/testing/temp_dir.h"
#include "suites/cli/fsdpp_binary.h"
#include "suites/cuda/cuda_testing.h"

using namespace fsdpp;

namespace {

using cuda_testing::with_env;

at::Device gpu() { return at::Device(at::kCUDA, 0); }

// Every collective on CUDA tensors against the values the Gloo path computes on the CPU.
void check_collectives_on_gpu(harness::RankContext& ctx) {
  auto& comm = ctx.comm;
  const int n = comm.size(), r = comm.rank();
  runtime::set_current_device(gpu());
  auto input = torch::arange(6, torch::kFloat).add(10 * r).to(gpu());
  auto gathered = torch::empty({int64_t{6} * n}, input.options());
  comm.all_gather_into(gathered, input);
  std::vector<torch::Tensor> parts;
  parts.reserve(n);
  for (int j = 0; j < n; ++j) parts.push_back(torch::arange(6, torch::kFloat).add(10 * j));
  EXPECT_TRUE(torch::equal(gathered.cpu(), torch::cat(parts)));

  auto rs_in = torch::arange(4 * n, torch::kFloat).mul(r + 1).to(gpu());
  auto rs_out = torch::empty({4}, rs_in.options());
  comm.reduce_scatter(rs_out, rs_in, comm::ReduceOp::Sum);
  const double ranks_sum = n * (n + 1) / 2.0;
  EXPECT_TRUE(torch::allclose(rs_out.cpu(), torch::arange(4 * r, 4 * r + 4, torch::kFloat) * ranks_sum));

  auto ar = torch::full({5}, static_cast<double>(r + 1), torch::TensorOptions().dtype(torch::kBFloat16).device(gpu()));
  comm.all_reduce(ar, comm::ReduceOp::Avg);
  EXPECT_TRUE(torch::equal(ar.cpu().to(torch::kFloat), torch::full({5}, ranks_sum / n)));

  auto bc = torch::full({3}, static_cast<double>(r), torch::TensorOptions().device(gpu()));
  comm.broadcast(bc, n - 1);
  EXPECT_TRUE(torch::equal(bc.cpu(), torch::full({3}, static_cast<double>(n - 1))));

  auto a2a_in = torch::full({int64_t{2} * n, 3}, static_cast<double>(r), torch::TensorOptions().device(gpu()));
  auto a2a_out = torch::empty({int64_t{2} * n, 3}, a2a_in.options());
  comm.all_to_all_single(a2a_out, a2a_in);
  for (int j = 0; j < n; ++j)
    EXPECT_TRUE(torch::equal(a2a_out.narrow(0, int64_t{2} * j, 2).cpu(), torch::full({2, 3}, double(j))));
}

}  // namespace

TEST(CudaComm, NcclCollectivesAreCorrectOnOneRank) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      1, [](harness::RankContext& ctx) { check_collectives_on_gpu(ctx); }, with_env({{"FSDPP_CUDA_COMM", "nccl"}}));
}

// The same through fsdpp's own NCCL group, the opt-in engine (the default is c10d's
// ProcessGroupNCCL, which the test above runs).
TEST(CudaComm, FsdppsOwnNcclEngineIsCorrectOnOneRank) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      1, [](harness::RankContext& ctx) { check_collectives_on_gpu(ctx); },
      with_env({{"FSDPP_CUDA_COMM", "nccl"}, {"FSDPP_NCCL_ENGINE", "fsdpp"}}));
}

TEST(CudaComm, NcclCollectivesAreCorrectOnTwoGpus) {
  REQUIRE_GPUS(2);
  harness::expect_ranks_pass(
      2, [](harness::RankContext& ctx) { check_collectives_on_gpu(ctx); }, with_env({{"FSDPP_CUDA_COMM", "nccl"}}));
}

// FSDPP_CUDA_COMM=gloo forces the host-staged path: this checks that path's results for three
// ranks on one GPU, not that the default (auto) picks it for them.
TEST(CudaComm, ForcedHostStagedGlooIsCorrectForThreeRanksSharingOneGpu) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      3, [](harness::RankContext& ctx) { check_collectives_on_gpu(ctx); }, with_env({{"FSDPP_CUDA_COMM", "gloo"}}));
}

// Stream semantics: the all-gather reads its input only after the kernels queued before it
// on the caller's stream (a long chain producing it), and the caller's later kernels see
// its output after wait() without any host synchronisation in between: when wait() returns,
// the chain queued before the all-gather is still running (a wait() that blocked the host
// until the collective finished would find the caller's stream idle).
TEST(CudaComm, NcclWorkIsOrderedWithTheCallersStreamWithoutHostSync) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      1,
      [](harness::RankContext& ctx) {
        runtime::set_current_device(gpu());
        const int64_t numel = 1 << 24;  // 64 MB: each kernel outlasts its launch
        auto x = torch::ones({numel}, torch::TensorOptions().device(gpu()));
        for (int i = 0; i < 500; ++i) x = x * 1.0001 + 0.0001;  // queued, not finished (milliseconds of work)
        auto expected = x.clone();
        auto out = torch::empty_like(x);
        auto work = ctx.comm.all_gather_into_async(out, x);
        x = torch::Tensor();  // the input may be freed at once: its memory is recorded on the NCCL stream
        auto filler = torch::full({numel}, 7.0, torch::TensorOptions().device(gpu()));  // may reuse freed blocks
        work.wait();
        EXPECT_FALSE(runtime::current_stream_idle(gpu())) << "wait() returned only after the caller's stream drained";
        auto y = out * 2;
        EXPECT_TRUE(torch::equal(y.cpu(), expected.cpu() * 2));
        EXPECT_EQ(filler.sum().item<double>(), 7.0 * static_cast<double>(numel));
      },
      with_env({{"FSDPP_CUDA_COMM", "nccl"}}));
}

namespace {

harness::EquivConfig cuda_equiv(std::optional<at::ScalarType> param_dtype) {
  // The default choice: NCCL when every rank has its own GPU, else host-staged Gloo.
  ::setenv("FSDPP_CUDA_COMM", "auto", 1);
  harness::EquivConfig c;
  c.device = gpu();
  c.steps = 10;
  c.fsdp.strategy = fsdp::ShardingStrategy::FullShard;
  if (param_dtype) {
    // bf16: the reference runs each rank's micro-batch on its own and reduces as the
    // communicator does, so the same kernels see the same shapes: bitwise, not merely
    // within bf16's tolerance.
    c.fsdp.mixed_precision.param_dtype = param_dtype;
    c.fsdp.mixed_precision.reduce_dtype = at::kFloat;
    c.deterministic = true;
  }
  return c;
}

}  // namespace

// fp32 within the fp32 policy (assert_close defaults) over 10 AdamW steps; bf16 within the
// bf16 policy against the reference that emulates the same casts. N=1 runs through NCCL,
// N=2 shares the GPU through host-staged Gloo.
TEST(CudaFsdp, Fp32FullShardMatchesTheUnshardedCudaReference) {
  REQUIRE_GPUS(1);
  for (int n : {1, 2}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    harness::expect_equivalent(
        n, [] { return harness::tiny_transformer_case(); }, cuda_equiv(std::nullopt));
  }
}

TEST(CudaFsdp, Bf16FullShardMatchesTheCastEmulatingCudaReference) {
  REQUIRE_GPUS(1);
  for (int n : {1, 2}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    harness::expect_equivalent(
        n, [] { return harness::tiny_transformer_case(); }, cuda_equiv(at::kBFloat16));
  }
}

TEST(CudaFsdp, CpuOffloadKeepsPinnedHostShardsAndMatchesTheReference) {
  REQUIRE_GPUS(1);
  auto config = cuda_equiv(std::nullopt);
  config.fsdp.cpu_offload = true;
  harness::expect_equivalent(
      1, [] { return harness::tiny_transformer_case(); }, config);
  harness::expect_ranks_pass(1, [](harness::RankContext& ctx) {
    runtime::set_current_device(gpu());
    auto model = harness::tiny_transformer_case();
    auto net = model.build(1);
    net->to(gpu());
    fsdp::FsdpOptions options;
    options.cpu_offload = true;
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, options, model.wrap);
    for (const auto& p : sharded->parameters()) {
      EXPECT_TRUE(p.is_cpu());
      EXPECT_TRUE(p.is_pinned());
    }
  });
}

TEST(CudaMemory, TelemetryFollowsTheCachingAllocator) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(1, [](harness::RankContext&) {
    const auto d = gpu();
    runtime::set_current_device(d);
    auto before = runtime::device_memory(d);
    const int64_t bytes = int64_t{256} << 20;
    {
      auto block = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kByte).device(d));
      auto held = runtime::device_memory(d);
      EXPECT_GE(held.allocated_bytes - before.allocated_bytes, bytes);
      EXPECT_GE(held.reserved_bytes, held.allocated_bytes);
    }
    auto after = runtime::device_memory(d);
    EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
    EXPECT_GE(after.peak_allocated_bytes - before.allocated_bytes, bytes);
    EXPECT_GE(after.reserved_bytes, bytes);  // cached, not returned to the driver
    runtime::reset_peak_memory(d);
    EXPECT_EQ(runtime::device_memory(d).peak_allocated_bytes, after.allocated_bytes);
  });
}

// Flash / efficient SDPA in bf16 against exact attention in fp64. bf16 policy: inputs
// rounded to bf16 (relative 2^-8) and bf16 outputs; softmax-weighted averages of values of
// size ~1 stay within 2e-2 absolute.
TEST(CudaModels, FusedAttentionMatchesExactAttention) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(1, [](harness::RankContext&) {
    auto options = torch::TensorOptions().device(gpu()).dtype(torch::kBFloat16);
    torch::manual_seed(3);
    auto q = torch::randn({2, 4, 128, 64}, options), k = torch::randn({2, 4, 128, 64}, options),
         v = torch::randn({2, 4, 128, 64}, options);
    auto fused = models::causal_attention(q, k, v).to(torch::kDouble).cpu();
    auto qd = q.to(torch::kDouble).cpu(), kd = k.to(torch::kDouble).cpu(), vd = v.to(torch::kDouble).cpu();
    auto scores = torch::matmul(qd, kd.transpose(-2, -1)) / 8.0;
    scores = scores.masked_fill(torch::ones({128, 128}, torch::kBool).triu(1), -INFINITY);
    auto exact = torch::matmul(torch::softmax(scores, -1), vd);
    EXPECT_LT((fused - exact).abs().max().item<double>(), 2e-2);
  });
}

// PyTorch's fused RMSNorm kernel (Llama's default on CUDA, models/layers.h) against HF's
// eager formula on the same GPU: output, input gradient and weight gradient, in fp32 and
// bf16, each within a bound derived from how the two compute (d = 256 features, n = 132
// rows; u = 2^-24 fp32, 2^-8 bf16, the unit round-off):
//   fp32: both sum in fp32 in different orders: output and input gradient within d u of
//         their largest magnitude; weight gradient within n u sum_rows |g xhat|.
//   bf16: eager rounds normed and w * normed (and g * w in backward) to bf16 where the
//         kernel keeps fp32 and rounds once: output within 3u |y|; input gradient within
//         3u rstd (|w g| + |xhat| mean|w g xhat|) + u |dx|; weight gradient within
//         3u sum_rows |g xhat| + u |dw|.
TEST(CudaModels, FusedRmsNormMatchesTheEagerFormula) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(1, [](harness::RankContext&) {
    runtime::set_current_device(gpu());
    ASSERT_STREQ(models::rms_norm_kernel_name(gpu()), FSDPP_HAS_FUSED_RMS_NORM ? "fused" : "eager");
    ASSERT_STREQ(models::rms_norm_kernel_name(at::Device(at::kCPU)), "eager");
    const int64_t n = 132, d = 256;
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      torch::manual_seed(5);
      auto options = torch::TensorOptions().device(gpu()).dtype(dtype);
      const auto x0 = torch::randn({4, n / 4, d}, options) * 3, g = torch::randn({4, n / 4, d}, options);
      const auto w0 = torch::rand({d}, options) + 0.5;
      auto run = [&](models::RmsNormKernel kernel) {
        models::set_rms_norm_kernel(kernel);
        models::RmsNorm norm(d, 1e-5);
        norm->to(gpu(), dtype);
        {
          torch::NoGradGuard no_grad;
          norm->weight.copy_(w0);
        }
        auto x = x0.clone().requires_grad_();
        auto y = norm(x);
        y.backward(g);
        return std::vector<torch::Tensor>{y.detach(), x.grad(), norm->weight.grad()};
      };
      const auto fused = run(models::RmsNormKernel::Fused), eager = run(models::RmsNormKernel::Eager);
      models::set_rms_norm_kernel(models::RmsNormKernel::Fused);
      // fp64 quantities for the bounds.
      auto xd = x0.to(torch::kDouble), gd = g.to(torch::kDouble), wd = w0.to(torch::kDouble);
      auto rstd = torch::rsqrt(xd.pow(2).mean(-1, true) + 1e-5), xhat = xd * rstd;
      auto wg = (wd * gd).abs();
      auto dw_terms = (gd * xhat).abs().sum(std::vector<int64_t>{0, 1});
      auto diff = [](const torch::Tensor& a, const torch::Tensor& b) {
        return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs();
      };
      const double u = dtype == torch::kFloat ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
      torch::Tensor bound_y, bound_dx, bound_dw;
      if (dtype == torch::kFloat) {
        bound_y = d * u * eager[0].to(torch::kDouble).abs().max();
        bound_dx = d * u * eager[1].to(torch::kDouble).abs().max();
        bound_dw = static_cast<double>(n) * u * dw_terms;
      } else {
        bound_y = 3 * u * eager[0].to(torch::kDouble).abs();
        bound_dx =
            3 * u * rstd * (wg + xhat.abs() * (wg * xhat.abs()).mean(-1, true)) + u * eager[1].to(torch::kDouble).abs();
        bound_dw = 3 * u * dw_terms + u * eager[2].to(torch::kDouble).abs();
      }
      EXPECT_TRUE((diff(fused[0], eager[0]) <= bound_y).all().item<bool>()) << "output, " << dtype;
      EXPECT_TRUE((diff(fused[1], eager[1]) <= bound_dx).all().item<bool>()) << "input gradient, " << dtype;
      EXPECT_TRUE((diff(fused[2], eager[2]) <= bound_dw).all().item<bool>()) << "weight gradient, " << dtype;
      // The two are different computations (else this test would compare a kernel with itself).
      if (FSDPP_HAS_FUSED_RMS_NORM) {
        EXPECT_FALSE(torch::equal(fused[1], eager[1])) << dtype;
      }
    }
  });
}

// The fused AdamW kernel against torch::optim::AdamW's per-tensor step on the same CUDA
// tensors and gradients, both groups (decayed matrix, undecayed bias), 20 steps: fp32
// within assert_close's defaults (rtol 1.3e-6, atol 1e-5; the kernel evaluates the same
// formula in another order, so they differ by round-off). Twice from the same start it
// gives the same bits, and its state is AdamW's, under the keys checkpoints look up.
TEST(CudaOptim, FusedAdamWStepsLikeTorchAdamWWithinRoundOffAndKeepsItsState) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(1, [](harness::RankContext&) {
    ASSERT_TRUE(optim::fused_adamw_available());
    runtime::set_current_device(gpu());
    auto f32 = torch::TensorOptions().device(gpu()).dtype(torch::kFloat);
    torch::manual_seed(11);
    const auto w0 = torch::randn({64, 33}, f32), b0 = torch::randn({33}, f32);
    std::vector<std::pair<torch::Tensor, torch::Tensor>> grads;
    grads.reserve(20);
    for (int step = 0; step < 20; ++step) grads.emplace_back(torch::randn({64, 33}, f32), torch::randn({33}, f32));
    optim::AdamWSettings s{3e-3, 0.9, 0.95, 1e-8, 0.1};

    auto train = [&](bool fused) {
      auto w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
      s.fused = fused;
      auto opt = optim::make_adamw({{"w", w}, {"b", b}}, s);
      for (const auto& [gw, gb] : grads) {
        w.mutable_grad() = gw.clone();
        b.mutable_grad() = gb.clone();
        opt->step();
        EXPECT_STREQ(optim::step_implementation(*opt), fused ? "fused" : "per-tensor");
      }
      return std::make_tuple(w.detach(), b.detach(), std::move(opt));
    };
    auto [w_fused, b_fused, fused] = train(true);
    auto [w_ref, b_ref, ref] = train(false);
    auto close = [](const torch::Tensor& a, const torch::Tensor& e) {
      return torch::allclose(a.cpu(), e.cpu(), /*rtol=*/1.3e-6, /*atol=*/1e-5);
    };
    EXPECT_TRUE(close(w_fused, w_ref)) << (w_fused - w_ref).abs().max().item<double>();
    EXPECT_TRUE(close(b_fused, b_ref)) << (b_fused - b_ref).abs().max().item<double>();
    EXPECT_FALSE(torch::equal(w_fused, w0));  // it moved
    auto [w_again, b_again, again] = train(true);
    EXPECT_TRUE(torch::equal(w_again, w_fused));
    EXPECT_TRUE(torch::equal(b_again, b_fused));

    // State: one AdamWParamState per parameter, keyed as torch::optim::AdamW keys it.
    ASSERT_EQ(fused->state().size(), 2u);
    for (const auto& group : fused->param_groups()) {
      for (const auto& p : group.params()) {
        auto it = fused->state().find(compat::optimizer_state_key(fused->state(), p));
        ASSERT_NE(it, fused->state().end());
        const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
        EXPECT_EQ(st.step(), 20);
        EXPECT_EQ(st.exp_avg().sizes(), p.sizes());
        EXPECT_EQ(st.exp_avg_sq().sizes(), p.sizes());
      }
    }
    const auto& m_fused = static_cast<const torch::optim::AdamWParamState&>(
        *fused->state().at(compat::optimizer_state_key(fused->state(), fused->param_groups()[0].params()[0])));
    const auto& m_ref = static_cast<const torch::optim::AdamWParamState&>(
        *ref->state().at(compat::optimizer_state_key(ref->state(), ref->param_groups()[0].params()[0])));
    EXPECT_TRUE(close(m_fused.exp_avg(), m_ref.exp_avg()));
    EXPECT_TRUE(close(m_fused.exp_avg_sq(), m_ref.exp_avg_sq()));
  });
}

// ---- Gradient norms: one _foreach_norm per device and dtype (core/optim/gradients.h).

namespace {

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Parameters of several shapes on `device`, parameter i's gradient randn * 3 in
// dtypes[i % dtypes.size()], and one parameter without a gradient. [300, 257] holds more
// elements than one chunk of CUDA's multi-tensor kernels (65536), so its norm is folded
// across blocks.
std::vector<at::Tensor> parameters_with_gradients_on(at::Device device, const std::vector<at::ScalarType>& dtypes) {
  torch::manual_seed(17);
  const std::vector<std::vector<int64_t>> shapes{{7, 5}, {5}, {3, 4, 2}, {1}, {300, 257}};
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto options = torch::TensorOptions().device(device).dtype(dtypes[i % dtypes.size()]);
    auto p = torch::zeros(shapes[i], options).requires_grad_();
    p.mutable_grad() = torch::randn(shapes[i], options) * 3;
    params.push_back(p);
  }
  params.push_back(torch::zeros({2}, torch::TensorOptions().device(device)).requires_grad_());  // no gradient
  return params;
}

std::vector<at::Tensor> gradients_of(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) grads.push_back(p.grad().defined() ? p.grad().detach().clone() : at::Tensor());
  return grads;
}

// clip_grad_norm_'s total in fp64 on the CPU from each gradient's own values:
// (sum_i sum_j |g_ij|^p)^(1/p), or max |g_ij| for p = inf; undefined gradients skipped.
double fp64_total_norm(const std::vector<at::Tensor>& grads, double norm_type) {
  double acc = 0;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    auto magnitudes = g.detach().cpu().to(torch::kDouble).abs();
    acc = std::isinf(norm_type) ? std::max(acc, magnitudes.max().item<double>())
                                : acc + magnitudes.pow(norm_type).sum().item<double>();
  }
  return std::isinf(norm_type) ? acc : std::pow(acc, 1.0 / norm_type);
}

// optim::clip_grad_norm on `device` against the fp64 reference and, in fp32, LibTorch's
// clip_grad_norm_ on the same device (as Gradients.ClipGradNormMatchesLibTorchsForEveryNormType
// on the CPU). Bounds: p = inf takes the largest |g|, exact in any dtype. p = 2 within the
// policy of the least precise dtype present: _foreach_norm accumulates in fp32 and returns
// the input's dtype, so a bf16 gradient's norm is rounded to bf16 once (at most 2^-8
// relative), and the coefficient and so every clipped gradient carry that rounding, plus
// one more for a bf16 product (2^-7 in all, within 1.6e-2); fp32's norms differ from fp64's
// by fp32 round-off of the sums (a few 2^-24).
void check_foreach_norms_and_clipping(at::Device device) {
  runtime::set_current_device(device);
  const std::vector<std::vector<at::ScalarType>> cases{
      {torch::kFloat}, {torch::kBFloat16}, {torch::kFloat, torch::kBFloat16}};  // the last: two groups
  for (const auto& dtypes : cases) {
    const auto tol = harness::default_tolerance(dtypes.back());
    for (double norm_type : {2.0, kInfNorm}) {
      for (double max_norm : {0.5, 1e6}) {  // clipped, and left alone
        SCOPED_TRACE("dtypes " + std::to_string(dtypes.size()) + ", last " + std::string(c10::toString(dtypes.back())) +
                     ", p=" + std::to_string(norm_type) + ", max_norm=" + std::to_string(max_norm));
        auto params = parameters_with_gradients_on(device, dtypes);
        const auto before = gradients_of(params);
        const double expected = fp64_total_norm(before, norm_type);
        const double total = optim::clip_grad_norm(params, max_norm, norm_type);
        if (std::isinf(norm_type)) {
          EXPECT_EQ(total, expected);
        } else {
          EXPECT_LE(std::abs(total - expected), tol.atol + tol.rtol * expected) << total << " vs " << expected;
        }
        const double coef = max_norm / (expected + 1e-6);
        ASSERT_EQ(coef < 1, max_norm == 0.5);  // the case clips exactly when it means to
        for (size_t i = 0; i < params.size(); ++i) {
          const auto& g = params[i].grad();
          ASSERT_EQ(g.defined(), before[i].defined()) << "tensor " << i;
          if (!g.defined()) continue;
          EXPECT_EQ(g.device(), device);
          EXPECT_EQ(g.scalar_type(), before[i].scalar_type());
          if (coef >= 1) {  // coef >= 1: untouched, bit for bit
            EXPECT_TRUE(torch::equal(g, before[i])) << "tensor " << i;
            continue;
          }
          auto cmp = harness::compare(g.cpu().to(torch::kDouble), before[i].cpu().to(torch::kDouble) * coef, tol);
          EXPECT_TRUE(cmp.ok) << "tensor " << i << ": " << cmp.describe();
        }
        if (dtypes.size() == 1 && dtypes[0] == torch::kFloat) {
          // LibTorch's clip_grad_norm_ on copies of the same gradients, on the same device.
          std::vector<at::Tensor> theirs;
          for (size_t i = 0; i < params.size(); ++i) {
            theirs.push_back(params[i].detach().clone().requires_grad_());
            if (before[i].defined()) theirs.back().mutable_grad() = before[i].clone();
          }
          const double torch_total = torch::nn::utils::clip_grad_norm_(theirs, max_norm, norm_type);
          EXPECT_NEAR(total, torch_total, 1.3e-6 * torch_total);
          for (size_t i = 0; i < params.size(); ++i)
            if (params[i].grad().defined()) {
              EXPECT_TRUE(torch::allclose(params[i].grad(), theirs[i].grad(), 1.3e-6, 1e-5)) << "tensor " << i;
            }
        }
      }
    }
  }
}

// ShardedModel::grad_norm on one rank, FULL_SHARD, fp32 and bf16 compute (fp32 gradients,
// the flat-shard path) against the fp64 norm of its gathered full gradients: fp32 policy
// for p = 2, exact for p = inf.
void check_sharded_grad_norm(comm::Communicator& comm, at::Device device) {
  runtime::set_current_device(device);
  const auto model = harness::tiny_transformer_case();
  for (std::optional<at::ScalarType> param_dtype : {std::optional<at::ScalarType>(), std::optional(at::kBFloat16)}) {
    SCOPED_TRACE(param_dtype ? "bf16 compute" : "fp32");
    auto net = model.build(1);
    net->to(device);
    fsdp::FsdpOptions options;
    if (param_dtype) {
      options.mixed_precision.param_dtype = param_dtype;
      options.mixed_precision.reduce_dtype = at::kFloat;
    }
    auto sharded = fsdp::ShardedModel::create(net, comm, options, model.wrap);
    const auto batch = model.batch(0, comm.rank());
    model.loss(*net, harness::TrainBatch{batch.input.to(device), batch.target.to(device)}).backward();
    std::vector<at::Tensor> full;
    for (const auto& [name, g] : sharded->gather_full_gradients()) full.push_back(g);
    const double expected = fp64_total_norm(full, 2.0);
    ASSERT_GT(expected, 0);
    EXPECT_NEAR(sharded->grad_norm(2.0), expected, 1e-5 + 1.3e-6 * expected);
    EXPECT_EQ(sharded->grad_norm(kInfNorm), fp64_total_norm(full, kInfNorm));
  }
}

}  // namespace

TEST(CudaOptim, ForeachNormsMatchTheFp64ReferenceAndClipLikeTorch) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      1,
      [](harness::RankContext& ctx) {
        check_foreach_norms_and_clipping(gpu());
        check_sharded_grad_norm(ctx.comm, gpu());
      },
      with_env({{"FSDPP_CUDA_COMM", "auto"}}));
}

// ---- Rotary tables (core/models/rotary.h) on the device.

namespace {

// The table computed on `device` against the one computed on the CPU, in fp32 and bf16,
// for Llama 3.2 1B's frequencies (head_dim 64, Llama 3 scaling) over 2048 positions
// (angles up to 2047 rad, so range reduction is exercised). The angles are the same fp32
// products on both (arange and outer are exact); cos and sin are each within a few fp32
// ulp of exact on either side: the fp32 policy. In bf16 the two round those fp32 values
// once, so they differ by at most one bf16 ulp (2^-7 relative): the bf16 policy.
// Then the cache: the same (seq, device, dtype) gives the same tensors; another dtype,
// seq or device a new table.
void check_rotary_table_on(at::Device device) {
  runtime::set_current_device(device);
  const auto inv_freq = models::rope_inverse_frequencies(models::llama_preset("1B"));
  models::RotaryTable table(inv_freq), on_cpu(inv_freq);
  const int64_t seq = 2048, head_dim = 64;
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto [cos, sin] = table.cos_sin(seq, device, dtype);
    EXPECT_EQ(cos.device(), device);
    EXPECT_EQ(cos.scalar_type(), dtype);
    EXPECT_EQ(sin.scalar_type(), dtype);
    EXPECT_EQ(cos.sizes(), (std::vector<int64_t>{seq, head_dim}));
    EXPECT_FALSE(cos.requires_grad() || sin.requires_grad());
    auto [cos_cpu, sin_cpu] = on_cpu.cos_sin(seq, at::kCPU, dtype);
    const auto cos_cmp = harness::compare(cos.cpu(), cos_cpu), sin_cmp = harness::compare(sin.cpu(), sin_cpu);
    EXPECT_TRUE(cos_cmp.ok) << "cos " << cos_cmp.describe();
    EXPECT_TRUE(sin_cmp.ok) << "sin " << sin_cmp.describe();
    auto [cos_again, sin_again] = table.cos_sin(seq, device, dtype);  // computed once per key
    EXPECT_TRUE(cos_again.is_same(cos));
    EXPECT_TRUE(sin_again.is_same(sin));
  }
  const auto bf16 = table.cos_sin(seq, device, torch::kBFloat16).first;
  const auto fp32 = table.cos_sin(seq, device, torch::kFloat).first;  // another dtype: a new table
  EXPECT_FALSE(fp32.is_same(bf16));
  EXPECT_EQ(fp32.scalar_type(), torch::kFloat);
  EXPECT_FALSE(table.cos_sin(seq - 1, device, torch::kFloat).first.is_same(fp32));  // another length
  const auto elsewhere = table.cos_sin(seq - 1, at::kCPU, torch::kFloat).first;     // another device
  EXPECT_TRUE(elsewhere.is_cpu());
  if (!device.is_cpu()) {
    EXPECT_FALSE(elsewhere.is_same(table.cos_sin(seq - 1, device, torch::kFloat).first));
  }
}

// Llama on `device` under bf16 autocast: its projections give bf16 queries, so every layer
// asks the shared table for bf16 (the rotation runs in bf16, as torch_peer.py's Llama),
// and a bf16 table made before the forward is the one it used (the table keeps the last
// request: a forward in another dtype would have replaced it). Without autocast the
// queries are fp32 and the forward replaces that table.
void check_llama_rotates_in_the_queries_dtype(at::Device device) {
  runtime::set_current_device(device);
  const auto c = models::llama_preset("tiny");
  models::LlamaForCausalLM model(c);
  model->to(device);
  torch::manual_seed(99);
  const int64_t seq = 8;
  const auto tokens = torch::randint(0, c.vocab_size, {2, seq}).to(device);
  const auto& table = model->model->rotary;
  torch::NoGradGuard no_grad;
  const auto primed = table->cos_sin(seq, device, torch::kBFloat16).first;
  {
    compat::AutocastGuard autocast(compat::AutocastState::only(device.type(), torch::kBFloat16));
    EXPECT_EQ(model->forward(tokens).scalar_type(), torch::kBFloat16);  // autocast did act
  }
  EXPECT_TRUE(table->cos_sin(seq, device, torch::kBFloat16).first.is_same(primed));
  EXPECT_EQ(model->forward(tokens).scalar_type(), torch::kFloat);
  EXPECT_FALSE(table->cos_sin(seq, device, torch::kBFloat16).first.is_same(primed));
}

}  // namespace

TEST(CudaModels, RotaryTableOnTheGpuMatchesTheCpuOneAndIsComputedOncePerShapeDeviceAndDtype) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(1, [](harness::RankContext&) { check_rotary_table_on(gpu()); });
}

TEST(CudaModels, LlamaUnderBf16AutocastRotatesQueriesAndKeysInBf16) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(1, [](harness::RankContext&) { check_llama_rotates_in_the_queries_dtype(gpu()); });
}

// ---- fsdpp bench-step on the device: the profiler's trace, the offloaded AdamW step.

namespace {

// `fsdpp bench-step` on a tiny GPT-2 cell, one rank on `device` ("cpu", "cuda"), one
// warm-up and two timed steps, plus `extra` flags: the record it wrote (null, with a test
// failure, when it failed).
nlohmann::json run_tiny_bench_step(const harness::TempDir& dir, const std::string& device, const std::string& extra) {
  const auto record = dir / "record.json";
  std::filesystem::remove(record);
  auto [code, output] = harness::run_shell(
      kFsdpp +
      " bench-step --model-type gpt2 --model-size tiny --vocab-size 256 --strategy full_shard"
      " --nproc 1 --batch-size 2 --seq-len 32 --warmup 1 --steps 2 --mixed-precision fp32 --device " +
      device + " --out " + record.string() + extra);
  EXPECT_EQ(code, 0) << output;
  std::ifstream in(record);
  if (code != 0 || !in) {
    ADD_FAILURE() << "no record at " << record.string();
    return nullptr;
  }
  return nlohmann::json::parse(in);
}

// For each host "fsdpp.step" annotation of a Kineto trace, in time order, how many device
// kernels were launched inside it. A kernel's launch is the CUDA runtime or driver call
// with its "correlation" id, timed on the host's clock as the annotation is (a kernel with
// no recorded launch counts at its own start, which Kineto puts on the same clock).
std::vector<int> kernels_launched_per_step(const nlohmann::json& trace) {
  std::vector<std::pair<double, double>> steps;
  std::map<int64_t, double> launch_us;
  std::vector<std::pair<int64_t, double>> kernels;  // correlation (-1: none), start
  for (const auto& e : trace.at("traceEvents")) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const std::string category = e.value("cat", ""), name = e.value("name", "");
    const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
    const auto args = e.value("args", nlohmann::json::object());
    const int64_t correlation = args.is_object() ? args.value("correlation", int64_t{-1}) : -1;
    if (category == "user_annotation" && name == harness::kStepScope) {
      steps.emplace_back(ts, ts + dur);
    } else if (category == "kernel") {
      kernels.emplace_back(correlation, ts);
    } else if ((category == "cuda_runtime" || category == "cuda_driver") && correlation >= 0) {
      launch_us[correlation] = ts;
    }
  }
  std::sort(steps.begin(), steps.end());
  std::vector<int> counts(steps.size(), 0);
  for (const auto& [correlation, start] : kernels) {
    const auto launch = launch_us.find(correlation);
    const double t = launch != launch_us.end() ? launch->second : start;
    for (size_t i = 0; i < steps.size(); ++i)
      if (t >= steps[i].first && t <= steps[i].second) ++counts[i];
  }
  return counts;
}

// The two timed steps' trace: two "fsdpp.step" annotations (not the warm-up's), on CUDA
// device kernels ("kernel") launched inside each, and `fsdpp results profile` lists them:
// its kernel table by default when the trace has kernels, else CPU operators'.
void check_profiled_bench_step(const std::string& device) {
  harness::TempDir dir("cuda-profile");
  const std::string trace_path = (dir / "trace.json").string();
  ASSERT_FALSE(run_tiny_bench_step(dir, device, " --profile-trace " + trace_path).is_null());
  std::ifstream in(trace_path);
  ASSERT_TRUE(in) << "no trace at " << trace_path;
  const auto per_step = kernels_launched_per_step(nlohmann::json::parse(in));
  ASSERT_EQ(per_step.size(), 2u);
  const bool cuda = device != "cpu";
  for (size_t i = 0; i < per_step.size(); ++i)
    if (cuda) {
      EXPECT_GT(per_step[i], 0) << "timed step " << i << " has no kernel launched inside it";
    }
  const auto profile = results::read_op_profile(trace_path);
  EXPECT_EQ(profile.steps, 2);
  EXPECT_EQ(profile.category_us.count("kernel") == 1, cuda);
  EXPECT_GT(profile.category_us.count("cpu_op"), 0u);
  const std::string category = cuda ? "kernel" : "cpu_op";
  auto [code, output] = harness::run_shell(kFsdpp + " results profile " + trace_path + " --top 3");
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, ::testing::HasSubstr("| all " + category + " |"));
  EXPECT_THAT(output, ::testing::HasSubstr("Top 3 " + category + " names by time per step"));
}

// bench-step's record names the AdamW kernels: under --cpu-offload the shards are fp32 in
// host memory and step with fsdpp's host kernel ("fused-cpu"); without it, on CUDA, with
// PyTorch's fused CUDA kernel ("fused"). Both train to the same losses within the fp32
// policy (the same gradients, two orders of the same fp32 update).
void check_bench_step_offload_record(const std::string& device) {
  harness::TempDir dir("cuda-offload-bench");
  const auto offloaded = run_tiny_bench_step(dir, device, " --cpu-offload");
  const auto resident = run_tiny_bench_step(dir, device, "");
  ASSERT_FALSE(offloaded.is_null());
  ASSERT_FALSE(resident.is_null());
  EXPECT_EQ(offloaded["adamw_step"], "fused-cpu");
  EXPECT_EQ(resident["adamw_step"], device == "cpu" ? "fused-cpu" : "fused");
  const auto a = offloaded["losses"].get<std::vector<double>>(), b = resident["losses"].get<std::vector<double>>();
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 + 1.3e-6 * std::abs(b[i])) << "step " << i;
}

}  // namespace

TEST(CudaBench, ProfileTraceHoldsEachTimedStepsKernelsAndResultsProfileListsThem) {
  REQUIRE_GPUS(1);
  check_profiled_bench_step("cuda");
}

TEST(CudaBench, CpuOffloadStepsAdamWWithTheHostKernelAndTrainsLikeTheCudaKernel) {
  REQUIRE_GPUS(1);
  check_bench_step_offload_record("cuda");
}

// ---- The host AdamW kernel under FSDP CPU offload, in process.

namespace {

struct FusedAdamWRun {
  std::vector<double> losses, grad_norms;
  std::vector<std::string> kernels;  // optim::step_implementation after each step
  std::map<std::string, at::Tensor> params;
};

// Five TrainSteps of the tiny transformer under FULL_SHARD on this rank's `device`, with
// FusedAdamW (make_adamw's default) at the equivalence runner's lr 1e-3, eps 1e-6, wd 0.1
// (EquivConfig says why these keep fp32 runs within the fp32 policy) and clipping at 1.
FusedAdamWRun train_with_fused_adamw(comm::Communicator& comm, at::Device device, bool cpu_offload) {
  runtime::set_current_device(device);
  const auto model = harness::tiny_transformer_case();
  auto net = model.build(1);
  net->to(device);
  fsdp::FsdpOptions options;
  options.cpu_offload = cpu_offload;
  auto sharded = fsdp::ShardedModel::create(net, comm, options, model.wrap);
  for (const auto& p : sharded->parameters()) {
    EXPECT_EQ(p.device(), cpu_offload ? at::Device(at::kCPU) : device);
    EXPECT_EQ(p.scalar_type(), at::kFloat);
    if (cpu_offload && device.is_cuda()) {
      EXPECT_TRUE(p.is_pinned());
    }
  }
  const optim::AdamWSettings settings{1e-3, 0.9, 0.999, 1e-6, 0.1};
  auto opt = optim::make_adamw(sharded->named_parameters(), settings);
  train::TrainStepOptions step_options;
  step_options.grad_clip = 1.0;
  train::TrainStep train_step(
      comm,
      [&](const train::MicroBatch& b) {
        return model.loss(*net, harness::TrainBatch{b.inputs, b.targets});
      },
      sharded.get(), *opt, step_options);
  FusedAdamWRun run;
  for (int step = 0; step < 5; ++step) {
    const auto done = train_step.run(settings.lr, [&](int) {
      const auto b = model.batch(step, comm.rank());
      return train::MicroBatch{b.input.to(device), b.target.to(device)};
    });
    run.losses.push_back(done.loss);
    run.grad_norms.push_back(done.grad_norm);
    run.kernels.emplace_back(optim::step_implementation(*opt));
  }
  for (const auto& [name, p] : sharded->gather_full_parameters()) run.params[name] = p.detach().cpu().clone();
  return run;
}

// With cpu_offload the optimizer's parameters are the fp32 host shards (pinned on CUDA) and
// FusedAdamW steps them with fsdpp's host kernel ("fused-cpu"); without it, on CUDA, it
// runs PyTorch's fused CUDA kernel ("fused"). The two runs see the same gradients at the
// first step and differ afterwards only by the two kernels' fp32 round-off: losses,
// gradient norms and the final parameters within the fp32 policy (assert_close defaults).
void check_offloaded_host_adamw(comm::Communicator& comm, at::Device device) {
  const auto resident = train_with_fused_adamw(comm, device, false);
  const auto offloaded = train_with_fused_adamw(comm, device, true);
  for (size_t s = 0; s < offloaded.kernels.size(); ++s) {
    EXPECT_EQ(offloaded.kernels[s], "fused-cpu") << "step " << s;
    EXPECT_EQ(resident.kernels[s], device.is_cuda() ? "fused" : "fused-cpu") << "step " << s;
    EXPECT_NEAR(offloaded.losses[s], resident.losses[s], 1e-5 + 1.3e-6 * std::abs(resident.losses[s])) << s;
    EXPECT_NEAR(offloaded.grad_norms[s], resident.grad_norms[s], 1e-5 + 1.3e-6 * resident.grad_norms[s]) << s;
  }
  EXPECT_NE(resident.losses.front(), resident.losses.back());  // it trained
  ASSERT_EQ(offloaded.params.size(), resident.params.size());
  for (const auto& [name, expected] : resident.params) {
    ASSERT_TRUE(offloaded.params.count(name)) << name;
    const auto cmp = harness::compare(offloaded.params.at(name), expected);
    EXPECT_TRUE(cmp.ok) << name << ": " << cmp.describe();
  }
}

}  // namespace

TEST(CudaOptim, CpuOffloadStepsThePinnedHostShardsWithTheHostKernelAndMatchesTheCudaKernel) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      1, [](harness::RankContext& ctx) { check_offloaded_host_adamw(ctx.comm, gpu()); },
      with_env({{"FSDPP_CUDA_COMM", "auto"}}));
}
