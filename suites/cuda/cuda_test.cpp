// The CUDA path: NCCL collectives with stream semantics, ranks sharing one GPU through
// host-staged Gloo, FSDP on CUDA against the unsharded CUDA reference (fp32 and bf16),
// caching-allocator telemetry, SDPA, pinned offload, the fused AdamW step. Every test needs a GPU and says so
// when skipped (CPU builds, machines without one); multi-rank NCCL needs one GPU per rank.
//
// The parent test process never touches CUDA before run_ranks forks (a CUDA context does
// not survive fork), so whether a GPU exists is read from /dev/nvidia*, and CUDA itself is
// only used inside the ranks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <regex>

#include "core/comm/communicator.h"
#include "core/compat/torch_compat.h"
#include "core/fsdp/sharded_model.h"
#include "core/models/attention.h"
#include "core/models/layers.h"
#include "core/optim/adamw.h"
#include "core/optim/fused_adamw.h"
#include "core/runtime/device.h"
#include "harness/testing/equivalence_check.h"
#include "harness/testing/multirank.h"

#ifndef FSDPP_WITH_CUDA
#define FSDPP_WITH_CUDA 0
#endif

using namespace fsdpp;

namespace {

// GPUs visible to this machine without initialising CUDA in this process (0 in CPU builds).
int gpus_without_cuda_init() {
#if FSDPP_WITH_CUDA
  int count = 0;
  std::regex node("nvidia[0-9]+");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec))
    if (std::regex_match(entry.path().filename().string(), node)) ++count;
  return count;
#else
  return 0;
#endif
}

#define REQUIRE_GPUS(n)                                                                                          \
  do {                                                                                                           \
    int have_ = gpus_without_cuda_init();                                                                        \
    if (have_ < (n))                                                                                             \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), this " << (FSDPP_WITH_CUDA ? "machine" : "CPU build") \
                   << " has " << have_;                                                                          \
  } while (0)

harness::RunOptions with_env(std::map<std::string, std::string> env = {}) {
  harness::RunOptions options;
  options.launch.echo_output = false;
  for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);  // inherited by the forked ranks
  return options;
}

at::Device gpu() { return at::Device(at::kCUDA, 0); }

// Every collective on CUDA tensors against the values the Gloo path computes on the CPU.
void check_collectives_on_gpu(harness::RankContext& ctx) {
  auto& comm = ctx.comm;
  const int n = comm.size(), r = comm.rank();
  runtime::set_current_device(gpu());
  auto input = torch::arange(6, torch::kFloat).add(10 * r).to(gpu());
  auto gathered = torch::empty({6 * n}, input.options());
  comm.all_gather_into(gathered, input);
  std::vector<torch::Tensor> parts;
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

  auto a2a_in = torch::full({2 * n, 3}, static_cast<double>(r), torch::TensorOptions().device(gpu()));
  auto a2a_out = torch::empty({2 * n, 3}, a2a_in.options());
  comm.all_to_all_single(a2a_out, a2a_in);
  for (int j = 0; j < n; ++j)
    EXPECT_TRUE(torch::equal(a2a_out.narrow(0, 2 * j, 2).cpu(), torch::full({2, 3}, double(j))));
}

}  // namespace

TEST(CudaComm, NcclCollectivesAreCorrectOnOneRank) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      1, [](harness::RankContext& ctx) { check_collectives_on_gpu(ctx); }, with_env({{"FSDPP_CUDA_COMM", "nccl"}}));
}

TEST(CudaComm, NcclCollectivesAreCorrectOnTwoGpus) {
  REQUIRE_GPUS(2);
  harness::expect_ranks_pass(
      2, [](harness::RankContext& ctx) { check_collectives_on_gpu(ctx); }, with_env({{"FSDPP_CUDA_COMM", "nccl"}}));
}

TEST(CudaComm, RanksSharingOneGpuGoThroughHostStagedGloo) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      3, [](harness::RankContext& ctx) { check_collectives_on_gpu(ctx); }, with_env({{"FSDPP_CUDA_COMM", "gloo"}}));
}

// Stream semantics: the all-gather reads its input only after the kernels queued before it
// on the caller's stream (a long chain producing it), and the caller's later kernels see
// its output after wait() without any host synchronisation in between.
TEST(CudaComm, NcclWorkIsOrderedWithTheCallersStreamWithoutHostSync) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      1,
      [](harness::RankContext& ctx) {
        runtime::set_current_device(gpu());
        auto x = torch::ones({1 << 22}, torch::TensorOptions().device(gpu()));
        for (int i = 0; i < 200; ++i) x = x * 1.0001 + 0.0001;  // queued, not finished
        auto expected = x.clone();
        auto out = torch::empty_like(x);
        auto work = ctx.comm.all_gather_into_async(out, x);
        x = torch::Tensor();  // the input may be freed at once: its memory is recorded on the NCCL stream
        auto filler = torch::full({1 << 22}, 7.0, torch::TensorOptions().device(gpu()));  // may reuse freed blocks
        work.wait();
        auto y = out * 2;
        EXPECT_TRUE(torch::equal(y.cpu(), expected.cpu() * 2));
        EXPECT_EQ(filler.sum().item<double>(), 7.0 * (1 << 22));
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
