// Sharded training equals unsharded training: every strategy, 1-4 ranks, prefetch on and
// off, on a toy MLP with awkward shapes and a small transformer with tied embeddings;
// bitwise in deterministic mode; gradient accumulation (both modes) and clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "core/fsdp/activation_checkpointing.h"
#include "core/fsdp/sharding.h"
#include "core/models/toy_mlp.h"
#include "core/nn/module_hooks.h"
#include "harness/testing/equivalence_check.h"

namespace fsdpp {
namespace {

using fsdp::ShardingStrategy;
using harness::EquivConfig;
using harness::EquivModel;

std::function<EquivModel()> model_named(const std::string& name) {
  return [name] { return harness::equiv_case(name); };
}

EquivConfig config_for(ShardingStrategy strategy, bool prefetch) {
  EquivConfig c;
  c.fsdp.strategy = strategy;
  c.fsdp.forward_prefetch = prefetch;
  c.fsdp.backward_prefetch = prefetch ? fsdp::BackwardPrefetch::Pre : fsdp::BackwardPrefetch::None;
  c.steps = 10;
  return c;
}

using ParityParam = std::tuple<std::string, int, ShardingStrategy, bool>;
class Parity : public ::testing::TestWithParam<ParityParam> {};

TEST_P(Parity, ShardedTrainingMatchesUnshardedWithinFp32Tolerance) {
  auto [model, world, strategy, prefetch] = GetParam();
  harness::expect_equivalent(world, model_named(model), config_for(strategy, prefetch),
                             [](const harness::EquivReport& r) {
                               EXPECT_EQ(r.steps.size(), 10u);
                               EXPECT_FALSE(r.tensors.empty());
                             });
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, Parity,
                         ::testing::Combine(::testing::Values("toy_mlp", "tiny_transformer"),
                                            ::testing::Values(1, 2, 3, 4), ::testing::ValuesIn(fsdp::all_strategies()),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_N" + std::to_string(std::get<1>(info.param)) + "_" +
                                  fsdp::to_string(std::get<2>(info.param)) +
                                  (std::get<3>(info.param) ? "_prefetch" : "_noprefetch");
                         });

class Deterministic : public ::testing::TestWithParam<std::tuple<int, ShardingStrategy>> {};

TEST_P(Deterministic, EveryParameterIsBitwiseTheRankOrderedMicroBatchReference) {
  auto [world, strategy] = GetParam();
  auto c = config_for(strategy, true);
  c.deterministic = true;
  c.lr = 1e-2;  // PyTorch's AdamW defaults otherwise: bitwise holds at any setting
  c.adam_eps = 1e-8;
  c.compare_full_at = {0, 4, 9};
  harness::expect_equivalent(world, model_named("tiny_transformer"), c, [](const harness::EquivReport& r) {
    int params_after_last_step = 0;
    for (const auto& t : r.tensors) {
      EXPECT_TRUE(t.bitwise_equal) << t.kind << " " << t.name << " at step " << t.step;
      params_after_last_step += t.kind == "param" && t.step == 9;
    }
    EXPECT_GT(params_after_last_step, 0);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Deterministic,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Values(ShardingStrategy::FullShard,
                                                                                          ShardingStrategy::ShardGradOp,
                                                                                          ShardingStrategy::NoShard)),
                         [](const auto& info) {
                           return "N" + std::to_string(std::get<0>(info.param)) + "_" +
                                  fsdp::to_string(std::get<1>(info.param));
                         });

// Hybrid's two averages (shard group, then replicas) are emulated step by step too.
INSTANTIATE_TEST_SUITE_P(Hybrid, Deterministic,
                         ::testing::Combine(::testing::Values(4),
                                            ::testing::Values(ShardingStrategy::HybridShard,
                                                              ShardingStrategy::HybridShardZero2)),
                         [](const auto& info) {
                           return "N" + std::to_string(std::get<0>(info.param)) + "_" +
                                  fsdp::to_string(std::get<1>(info.param));
                         });

class Accumulation : public ::testing::TestWithParam<std::tuple<int, ShardingStrategy, bool>> {};

TEST_P(Accumulation, MicroStepsEqualOneStepOnTheConcatenatedBatch) {
  auto [world, strategy, without_sync] = GetParam();
  auto c = config_for(strategy, true);
  c.grad_accum = 3;
  c.accumulate_without_sync = without_sync;
  harness::expect_equivalent(world, model_named("tiny_transformer"), c);
}

INSTANTIATE_TEST_SUITE_P(BothModes, Accumulation,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values(ShardingStrategy::FullShard,
                                                              ShardingStrategy::ShardGradOp, ShardingStrategy::NoShard,
                                                              ShardingStrategy::HybridShard),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return "N" + std::to_string(std::get<0>(info.param)) + "_" +
                                  fsdp::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_no_sync" : "_sync_every_micro_step");
                         });

// A unit whose block takes a second input that requires grad: a skip from before the first
// block, read by every block. Both inputs go through the unit's one post-backward node
// (FSDP2 registers it on every input), so its reduction waits for both; checkpointed, both
// are inputs of the checkpoint and get their gradients through the recomputation.
struct SkipBlockImpl : torch::nn::Module {
  SkipBlockImpl() : torch::nn::Module("SkipBlock") {
    a = register_module("a", torch::nn::Linear(6, 6));
    b = register_module("b", torch::nn::Linear(6, 6));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& skip) {
    return torch::tanh(nn::call(a, x)) + nn::call(b, skip) * x;
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};
TORCH_MODULE(SkipBlock);

struct SkipNetImpl : torch::nn::Module {
  SkipNetImpl() : torch::nn::Module("SkipNet") {
    in = register_module("in", torch::nn::Linear(5, 6));
    side = register_module("side", torch::nn::Linear(5, 6));
    for (int i = 0; i < 3; ++i) blocks.push_back(register_module("block" + std::to_string(i), SkipBlock()));
    out = register_module("out", torch::nn::Linear(6, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = nn::call(in, x);
    const auto skip = nn::call(side, x);
    for (auto& block : blocks) h = nn::call(block, h, skip);
    return nn::call(out, h);
  }
  torch::nn::Linear in{nullptr}, side{nullptr}, out{nullptr};
  std::vector<SkipBlock> blocks;
};
TORCH_MODULE(SkipNet);

EquivModel skip_net_case(bool checkpointed) {
  EquivModel m;
  m.name = checkpointed ? "skip_net_checkpointed" : "skip_net";
  m.build = [checkpointed](uint64_t seed) -> std::shared_ptr<torch::nn::Module> {
    torch::manual_seed(seed);
    auto net = SkipNet().ptr();
    if (checkpointed) fsdp::apply_activation_checkpointing(*net, {{"SkipBlock"}, 1});
    return net;
  };
  m.loss = [](torch::nn::Module& net, const harness::TrainBatch& b) {
    return torch::mse_loss(nn::call_impl(dynamic_cast<SkipNetImpl&>(net), b.input), b.target);
  };
  m.batch = [](int64_t step, int64_t index) {
    const double phase = 0.7 * static_cast<double>(step) + 1.3 * static_cast<double>(index);
    return harness::TrainBatch{torch::sin(torch::arange(20, torch::kFloat).reshape({4, 5}) + phase),
                               torch::cos(torch::arange(12, torch::kFloat).reshape({4, 3}) * 0.5 + phase)};
  };
  m.concat = [](const std::vector<harness::TrainBatch>& parts) {
    std::vector<torch::Tensor> inputs, targets;
    for (const auto& p : parts) {
      inputs.push_back(p.input);
      targets.push_back(p.target);
    }
    return harness::TrainBatch{torch::cat(inputs), torch::cat(targets)};
  };
  m.wrap = fsdp::wrap_by_module_type({"SkipBlock"});
  return m;
}

class SecondInput : public ::testing::TestWithParam<std::tuple<bool, ShardingStrategy>> {};

TEST_P(SecondInput, AUnitWhoseSecondInputRequiresGradTrainsBitwiseLikeTheUnshardedModule) {
  auto [checkpointed, strategy] = GetParam();
  auto c = config_for(strategy, true);
  c.deterministic = true;
  harness::expect_equivalent(
      3, [checkpointed = checkpointed] { return skip_net_case(checkpointed); }, c,
      [](const harness::EquivReport& r) {
        EXPECT_EQ(r.steps.size(), 10u);
        EXPECT_FALSE(r.tensors.empty());
        for (const auto& t : r.tensors) EXPECT_TRUE(t.bitwise_equal) << t.name;
      });
}

INSTANTIATE_TEST_SUITE_P(PlainAndCheckpointed, SecondInput,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(ShardingStrategy::FullShard, ShardingStrategy::NoShard)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "checkpointed_" : "plain_") +
                                  fsdp::to_string(std::get<1>(info.param));
                         });

class Clipping : public ::testing::TestWithParam<std::tuple<double, ShardingStrategy>> {};

TEST_P(Clipping, ClippedTrainingAndTotalNormMatchClipGradNorm) {
  auto [norm_type, strategy] = GetParam();
  auto c = config_for(strategy, true);
  c.clip_max_norm = 0.5;
  c.norm_type = norm_type;
  harness::expect_equivalent(3, model_named("tiny_transformer"), c, [](const harness::EquivReport& r) {
    for (const auto& s : r.steps) EXPECT_GT(s.ref_grad_norm, 0.5) << "clipping must really happen at step " << s.step;
  });
}

INSTANTIATE_TEST_SUITE_P(Norms, Clipping,
                         ::testing::Combine(::testing::Values(2.0, 1.0, INFINITY),
                                            ::testing::Values(ShardingStrategy::FullShard, ShardingStrategy::NoShard)),
                         [](const auto& info) {
                           double p = std::get<0>(info.param);
                           return std::string(std::isinf(p) ? "inf" : std::to_string(static_cast<int>(p))) + "_" +
                                  fsdp::to_string(std::get<1>(info.param));
                         });

TEST(Prefetch, BackwardPostAndAOneGatherLimitTrainCorrectly) {
  // Also guards against a prefetch that outlives backward: its all-gather would hand the
  // next forward the shards from before the optimizer step.
  for (const char* model : {"tiny_transformer", "toy_mlp"})
    for (int world : {2, 3}) {
      auto c = config_for(ShardingStrategy::FullShard, true);
      c.fsdp.backward_prefetch = fsdp::BackwardPrefetch::Post;
      c.fsdp.max_inflight_all_gathers = 1;
      harness::expect_equivalent(world, model_named(model), c);
    }
}

TEST(UnusedAndTied, UnusedParametersStayUntouchedAndTiedOnesTrainOnce) {
  // The equivalence compares every parameter, including the never-called `unused`
  // layers (gradient undefined on both sides, so AdamW skips them) and the tied
  // embedding/head weight of the transformer.
  harness::expect_ranks_pass(3, [](harness::RankContext& ctx) {
    auto model = harness::toy_mlp_case();
    auto net = model.build(1);
    auto initial = dynamic_cast<models::ToyMlpImpl&>(*net).block1->unused->weight.clone();
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, {}, model.wrap);
    torch::optim::AdamW opt(sharded->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      model.loss(*net, model.batch(step, ctx.rank)).backward();
      opt.step();
    }
    int unused_grads = 0, unused_weights = 0;
    for (auto& [name, g] : sharded->gather_full_gradients()) {
      if (name.find("unused") == std::string::npos) continue;
      ++unused_grads;
      EXPECT_FALSE(g.defined()) << name;
    }
    for (auto& [name, p] : sharded->gather_full_parameters()) {
      if (name != "block1.unused.weight") continue;
      ++unused_weights;
      EXPECT_TRUE(torch::equal(p, initial));
    }
    EXPECT_EQ(unused_grads, 4);  // weight and bias of block1.unused and block2.unused
    EXPECT_EQ(unused_weights, 1);
  });
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case();
    auto sharded = fsdp::ShardedModel::create(model.build(1), ctx.comm, {}, model.wrap);
    int tied = 0;
    for (auto& [name, p] : sharded->named_parameters()) tied += name == "wte.weight" || name == "head_weight";
    EXPECT_EQ(tied, 1) << "the tied weight is one parameter";
    EXPECT_EQ(sharded->units().back()->name(), "root");
  });
  harness::expect_equivalent(4, model_named("tiny_transformer"), config_for(ShardingStrategy::FullShard, true));
}

TEST(WrapPolicies, TypeSizeAndPredicatePoliciesFormTheExpectedUnits) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case();
    auto by_type = fsdp::ShardedModel::create(model.build(1), ctx.comm, {},
                                              fsdp::wrap_by_module_type({"fsdpp::models::TinyBlockImpl"}));
    EXPECT_EQ(by_type->units().size(), 4u);  // 3 blocks + root
    // A block holds 1848 parameters; none of its children reach that alone.
    auto by_size = fsdp::ShardedModel::create(model.build(1), ctx.comm, {}, fsdp::wrap_by_min_params(1848));
    EXPECT_EQ(by_size->units().size(), 4u);
    EXPECT_EQ(by_size->units().front()->name(), "blocks.2");
    auto by_name = fsdp::ShardedModel::create(model.build(1), ctx.comm, {}, [](const fsdp::WrapCandidate& c) {
      return c.qualified_name.size() >= 3 && c.qualified_name.compare(c.qualified_name.size() - 3, 3, ".fc") == 0;
    });
    EXPECT_EQ(by_name->units().size(), 4u);  // blocks.{0,1,2}.fc + root
  });
}

TEST(WrapPolicies, NestedAndFineGrainedUnitsTrainCorrectly) {
  // Size-based wrapping at 100 parameters makes every Linear of every block its own unit,
  // leaving the LayerNorms and embeddings to the root.
  auto fine = [] {
    auto m = harness::tiny_transformer_case();
    m.wrap = fsdp::wrap_by_min_params(100);
    return m;
  };
  harness::expect_equivalent(3, fine, config_for(ShardingStrategy::FullShard, true));
  // Blocks and, inside them, their MLP input layer: units within units.
  auto nested = [] {
    auto m = harness::tiny_transformer_case();
    m.wrap = [](const fsdp::WrapCandidate& c) {
      return c.module.name() == "fsdpp::models::TinyBlockImpl" ||
             (c.qualified_name.size() > 3 && c.qualified_name.compare(c.qualified_name.size() - 3, 3, ".fc") == 0);
    };
    return m;
  };
  harness::expect_equivalent(3, nested, config_for(ShardingStrategy::FullShard, true));
  harness::expect_equivalent(4, nested, config_for(ShardingStrategy::HybridShardZero2, false));
}

}  // namespace
}  // namespace fsdpp
