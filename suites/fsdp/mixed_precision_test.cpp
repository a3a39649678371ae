// Mixed precision (FSDP2's MixedPrecisionPolicy) and CPU offload, each composed with every
// sharding strategy and held against the equivalence runner's reference: a copy of the
// model in param_dtype with an fp32 optimizer, reducing like the communicator does.
//
// Tolerance policy here: runs that do the same arithmetic as the emulating reference
// (deterministic mode) must be bitwise equal, at any dtype. A bf16/fp16 run against the
// fp32 run differs by design; its loss curve must stay within the bound stated below.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "core/fsdp/sharded_model.h"
#include "core/fsdp/sharding.h"
#include "core/nn/module_hooks.h"
#include "core/runtime/capabilities.h"
#include "harness/testing/equivalence_check.h"

namespace fsdpp {
namespace {

using fsdp::ShardingStrategy;
using harness::EquivConfig;

auto tiny_transformer = [] { return harness::equiv_case("tiny_transformer"); };

using runtime::cpu_has_fp16_kernels;  // fp16 compute runs where the build has the kernels

EquivConfig bitwise_config(ShardingStrategy strategy, std::optional<at::ScalarType> param,
                           std::optional<at::ScalarType> reduce, bool offload) {
  EquivConfig c;
  c.fsdp.strategy = strategy;
  c.fsdp.mixed_precision.param_dtype = param;
  c.fsdp.mixed_precision.reduce_dtype = reduce;
  c.fsdp.cpu_offload = offload;
  c.deterministic = true;
  c.steps = 5;
  c.compare_full_at = {0, 4};
  return c;
}

// A Linear(8, 4) sharded over `comm` as one FSDP unit with bf16 parameters and fp32
// gradient reduction.
struct ShardedBf16Linear {
  torch::nn::Linear linear;
  std::shared_ptr<fsdp::ShardedModel> sharded;
};

ShardedBf16Linear sharded_bf16_linear(comm::Communicator& comm, bool bias) {
  auto linear = torch::nn::Linear(torch::nn::LinearOptions(8, 4).bias(bias));
  fsdp::FsdpOptions o;
  o.mixed_precision.param_dtype = at::kBFloat16;
  o.mixed_precision.reduce_dtype = at::kFloat;
  auto sharded = fsdp::ShardedModel::create(linear.ptr(), comm, o, fsdp::wrap_nothing());
  return {linear, sharded};
}

void expect_bitwise(const harness::EquivReport& r) {
  int params = 0;
  for (const auto& t : r.tensors) {
    EXPECT_TRUE(t.bitwise_equal) << t.kind << " " << t.name << " at step " << t.step;
    params += t.kind == "param";
  }
  EXPECT_GT(params, 0);
}

// --- every strategy x {bf16 with fp32 reduce, bf16, fp16 with fp32 reduce, offload} -----

using Case = std::tuple<ShardingStrategy, std::string>;
class MixedPrecisionAndOffload : public ::testing::TestWithParam<Case> {};

TEST_P(MixedPrecisionAndOffload, EqualsTheCastEmulatingReferenceBitwise) {
  auto [strategy, variant] = GetParam();
  std::optional<at::ScalarType> param, reduce;
  bool offload = variant == "offload" || variant == "bf16_offload";
  if (variant == "bf16_fp32reduce" || variant == "bf16_offload") param = at::kBFloat16, reduce = at::kFloat;
  if (variant == "bf16") param = at::kBFloat16;
  if (variant == "fp16_fp32reduce") param = at::kHalf, reduce = at::kFloat;
  if (param == at::kHalf && !cpu_has_fp16_kernels()) GTEST_SKIP() << "this LibTorch has no fp16 CPU kernels";
  // Hybrid strategies need 4 ranks for both mesh dimensions to be real.
  const bool hybrid = strategy == ShardingStrategy::HybridShard || strategy == ShardingStrategy::HybridShardZero2;
  harness::expect_equivalent(hybrid ? 4 : 2, tiny_transformer, bitwise_config(strategy, param, reduce, offload),
                             expect_bitwise);
}

INSTANTIATE_TEST_SUITE_P(
    EveryStrategy, MixedPrecisionAndOffload,
    ::testing::Combine(::testing::ValuesIn(fsdp::all_strategies()),
                       ::testing::Values("bf16_fp32reduce", "bf16", "fp16_fp32reduce", "offload", "bf16_offload")),
    [](const auto& info) { return fsdp::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param); });

// --- bytes and dtypes -------------------------------------------------------------------

TEST(MixedPrecision, AllGatherMovesParamDtypeBytesAndShardsStayFp32) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::equiv_case("tiny_transformer");
    auto bytes_of_one_step = [&](std::optional<at::ScalarType> param_dtype) {
      fsdp::FsdpOptions o;
      o.mixed_precision.param_dtype = param_dtype;
      auto net = model.build(1);
      auto sharded = fsdp::ShardedModel::create(net, ctx.comm, o, model.wrap);
      for (const auto& p : sharded->parameters()) EXPECT_EQ(p.scalar_type(), at::kFloat);
      model.loss(*net, model.batch(0, ctx.rank)).backward();
      for (const auto& p : sharded->parameters()) EXPECT_EQ(p.scalar_type(), at::kFloat) << "after backward";
      return std::make_pair(sharded->comm_stats(comm::CollectiveKind::AllGather).bytes_sent,
                            sharded->comm_stats(comm::CollectiveKind::ReduceScatter).bytes_sent);
    };
    auto [ag32, rs32] = bytes_of_one_step(std::nullopt);
    auto [ag16, rs16] = bytes_of_one_step(at::kBFloat16);
    EXPECT_GT(ag32, 0);
    EXPECT_EQ(ag16 * 2, ag32);
    EXPECT_EQ(rs16 * 2, rs32);  // reduce_dtype defaults to param_dtype
  });
}

// A shard group of one (N=1 with mixed precision takes the flat-buffer path) runs no
// reduce-scatter: the packed fp32 input is its own average, so the gradient shard is the
// bf16 gradient widened to fp32, with no collective issued (FSDP2 skips it there too).
TEST(MixedPrecision, AShardGroupOfOneRunsNoReduceScatterAndKeepsItsGradient) {
  harness::expect_ranks_pass(1, [](harness::RankContext& ctx) {
    auto [linear, sharded] = sharded_bf16_linear(ctx.comm, /*bias=*/false);
    const auto upstream = torch::arange(4, at::kFloat).add(1).mul(std::ldexp(1.0, -9)).to(at::kBFloat16);
    (nn::call(linear, torch::ones({1, 8}, at::kBFloat16)) * upstream).sum().backward();
    auto grads = sharded->gather_full_gradients();
    ASSERT_EQ(grads.size(), 1u);
    // d(sum(out * u)) / dW[i][j] = u[i] (the input is all ones), exact in bf16 and fp32.
    EXPECT_TRUE(torch::equal(grads[0].second, upstream.to(at::kFloat).unsqueeze(1).expand({4, 8}))) << grads[0].second;
    EXPECT_EQ(sharded->comm_stats(comm::CollectiveKind::ReduceScatter).calls, 0);
  });
}

// The all-gather of a shard group of one is the identity: no collective runs, and the
// module's tensors hold the bf16 cast of the fp32 master shard (cast straight from it),
// also after an optimizer step has changed the master.
TEST(MixedPrecision, AShardGroupOfOneRunsNoAllGatherAndUnshardsTheBf16CastOfItsMasterWeights) {
  harness::expect_ranks_pass(1, [](harness::RankContext& ctx) {
    auto [linear, sharded] = sharded_bf16_linear(ctx.comm, /*bias=*/true);
    const auto masters = sharded->named_parameters();  // fp32, whole on one rank
    ASSERT_EQ(masters.size(), 2u);
    torch::optim::AdamW opt(sharded->parameters(), torch::optim::AdamWOptions(1e-2));
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      auto out = nn::call(linear, torch::randn({2, 8}).to(at::kBFloat16));
      // The root unit stays unsharded from forward to backward: the module's tensors now.
      for (const auto& [name, master] : masters) {
        const auto unsharded = linear->named_parameters()[name];
        EXPECT_EQ(unsharded.scalar_type(), at::kBFloat16) << name;
        EXPECT_TRUE(torch::equal(unsharded, master.to(at::kBFloat16))) << name << " at step " << step;
      }
      out.sum().backward();
      opt.step();
    }
    EXPECT_EQ(sharded->comm_stats(comm::CollectiveKind::AllGather).calls, 0);
    EXPECT_EQ(sharded->comm_stats(comm::CollectiveKind::ReduceScatter).calls, 0);
  });
}

// FSDP2's output_dtype: the root's floating output is cast to it (the bf16 compute's own
// result, widened), and left as computed where it is unset.
TEST(MixedPrecision, OutputDtypeCastsTheRootsOutputAndUnsetLeavesTheComputeDtype) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    for (bool set : {true, false}) {
      torch::manual_seed(4);
      auto linear = torch::nn::Linear(8, 4);
      fsdp::FsdpOptions o;
      o.mixed_precision.param_dtype = at::kBFloat16;
      if (set) o.mixed_precision.output_dtype = at::kFloat;
      auto sharded = fsdp::ShardedModel::create(linear.ptr(), ctx.comm, o, fsdp::wrap_nothing());
      torch::manual_seed(9);
      const auto x = torch::randn({2, 8});
      auto out = nn::call(linear, x);
      EXPECT_EQ(out.scalar_type(), set ? at::kFloat : at::kBFloat16) << "output_dtype set: " << set;
      const auto compute = torch::nn::functional::linear(x.to(at::kBFloat16), linear->weight, linear->bias);
      EXPECT_TRUE(torch::equal(out, compute.to(out.scalar_type()))) << "output_dtype set: " << set;
      out.sum().backward();
    }
  });
}

// A world of one through the flat-buffer path (a separate fp32 master): the all-gather is
// the shard cast into the module's tensors, the reduce-scatter the packed input, each
// gradient cast to fp32 as it is packed. The same bits as the reference, also with offload
// (the shard copied to the compute device first).
TEST(MixedPrecision, AWorldOfOneEqualsTheCastEmulatingReferenceBitwise) {
  for (bool offload : {false, true})
    harness::expect_equivalent(1, tiny_transformer,
                               bitwise_config(ShardingStrategy::FullShard, at::kBFloat16, at::kFloat, offload),
                               expect_bitwise);
}

// Gradients exact in bf16 whose sums are not: rank 0's two micro-steps give 1 and 2^-9,
// rank 1's give 2^-9 twice. Accumulated and averaged in fp32 the weight gradient is
// (1 + 2^-9 + 2^-8) / 2; bf16 (8 significant bits) cannot hold that, so accumulating or
// reducing in bf16 would round it (to 0.5 or nearby).
TEST(MixedPrecision, Fp32ReduceDtypeAccumulatesAndReducesInFp32) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto [linear, sharded] = sharded_bf16_linear(ctx.comm, /*bias=*/false);
    const double tiny = std::ldexp(1.0, -9);
    const double upstream[2][2] = {{1.0, tiny}, {tiny, tiny}};  // [rank][micro-step]
    for (int micro = 0; micro < 2; ++micro) {
      sharded->set_requires_gradient_sync(micro == 1);  // no sync on the first micro-step
      auto out = nn::call(linear, torch::ones({1, 8}, at::kBFloat16));
      EXPECT_EQ(out.scalar_type(), at::kBFloat16);
      // d(sum(out * u)) / dW = u for every weight (the input is all ones).
      (out * upstream[ctx.rank][micro]).sum().backward();
    }
    auto grads = sharded->gather_full_gradients();
    ASSERT_EQ(grads.size(), 1u);
    const double expected = (1.0 + tiny + 2 * tiny) / 2;
    EXPECT_TRUE(torch::equal(grads[0].second, torch::full({4, 8}, expected, at::kFloat))) << grads[0].second;
    EXPECT_NE(torch::tensor(expected, at::kFloat).to(at::kBFloat16).to(at::kFloat).item<double>(), expected);
  });
}

// --- against fp32 -----------------------------------------------------------------------

// The bound: a bf16 rounding is 2^-8 = 3.9e-3 relative. The logged loss averages ~10^2
// token losses whose rounding errors partly cancel, and 50 AdamW steps of training let
// the two runs drift apart; we allow 2% of the loss (about five bf16 ulps); measured
// largest difference 0.64% (printed below). fp16 has 3 more mantissa bits: 0.5%.
TEST(MixedPrecision, LossCurveStaysWithinTheStatedBoundOfFp32Over50Steps) {
  const bool fp16_runs = cpu_has_fp16_kernels();
  harness::expect_ranks_pass(2, [fp16_runs](harness::RankContext& ctx) {
    // Each run is also held bitwise to its own-dtype emulating reference.
    auto losses = [&](std::optional<at::ScalarType> param) {
      EquivConfig c;
      c.fsdp.mixed_precision.param_dtype = param;
      c.fsdp.mixed_precision.reduce_dtype = at::kFloat;
      c.steps = 50;
      c.deterministic = true;
      auto report = harness::run_equivalence(ctx.comm, tiny_transformer(), c);
      if (ctx.rank == 0) {
        EXPECT_TRUE(report.ok()) << report.table();
      }
      std::vector<double> out;
      for (const auto& s : report.steps) out.push_back(s.loss);
      return out;
    };
    auto fp32 = losses(std::nullopt), bf16 = losses(at::kBFloat16);
    auto fp16 = fp16_runs ? losses(at::kHalf) : fp32;  // without fp16 kernels only bf16 is checked
    if (ctx.rank != 0) return;
    ASSERT_EQ(fp32.size(), 50u);
    ASSERT_EQ(bf16.size(), 50u);
    EXPECT_LT(fp32.back(), fp32.front() - 0.05) << "the model must learn for the comparison to mean something";
    double worst_bf16 = 0, worst_fp16 = 0;
    for (size_t i = 0; i < fp32.size(); ++i) {
      worst_bf16 = std::max(worst_bf16, std::abs(bf16[i] - fp32[i]) / fp32[i]);
      worst_fp16 = std::max(worst_fp16, std::abs(fp16[i] - fp32[i]) / fp32[i]);
    }
    std::printf("loss %.4f -> %.4f (fp32); largest relative difference bf16 %.3g, fp16 %s\n", fp32.front(), fp32.back(),
                worst_bf16, fp16_runs ? std::to_string(worst_fp16).c_str() : "not run (no fp16 CPU kernels)");
    EXPECT_LT(worst_bf16, 0.02);
    EXPECT_LT(worst_fp16, 0.005);
  });
}

}  // namespace
}  // namespace fsdpp
