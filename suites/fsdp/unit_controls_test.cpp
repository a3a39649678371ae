// FSDP2's controls: explicit forward and backward prefetch lists
// (set_modules_to_forward_prefetch / set_modules_to_backward_prefetch) and a unit's own
// reshard_after_forward, which change when all-gathers run and never what is computed; and
// the gradient divide factor (set_gradient_divide_factor).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/fsdp/sharded_model.h"
#include "harness/equiv/equivalence.h"
#include "harness/testing/multirank.h"

namespace fsdpp {
namespace {

using comm::CollectiveKind;

models::TinyTransformerConfig four_blocks() {
  models::TinyTransformerConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.heads = 4;
  c.layers = 4;
  c.seq_len = 8;
  return c;
}

struct ControlledRun {
  std::shared_ptr<torch::nn::Module> net;
  std::shared_ptr<fsdp::ShardedModel> sharded;
  std::vector<std::string> all_gathers;  // unit names, in issue order

  const torch::nn::Module& module(const std::string& name) const { return *net->named_modules()[name]; }
};

// FULL_SHARD, by default without implicit prefetch: every all-gather the listener sees is a
// unit's own unshard or one the test asked for.
ControlledRun make_run(const harness::EquivModel& model, comm::Communicator& comm, bool implicit_prefetch = false) {
  ControlledRun r;
  r.net = model.build(1);
  fsdp::FsdpOptions o;
  o.forward_prefetch = implicit_prefetch;
  o.backward_prefetch = implicit_prefetch ? fsdp::BackwardPrefetch::Pre : fsdp::BackwardPrefetch::None;
  r.sharded = fsdp::ShardedModel::create(r.net, comm, o, model.wrap);
  r.sharded->set_all_gather_listener([&all = r.all_gathers](const fsdp::FsdpUnit& u) { all.push_back(u.name()); });
  return r;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " ") + n;
  return out;
}

void expect_same_gradients(fsdp::ShardedModel& a, fsdp::ShardedModel& b) {
  auto ga = a.gather_full_gradients(), gb = b.gather_full_gradients();
  ASSERT_EQ(ga.size(), gb.size());
  ASSERT_FALSE(ga.empty());
  for (size_t i = 0; i < ga.size(); ++i) {
    ASSERT_EQ(ga[i].first, gb[i].first);
    ASSERT_TRUE(ga[i].second.defined()) << ga[i].first;
    EXPECT_TRUE(torch::equal(ga[i].second, gb[i].second)) << ga[i].first;
  }
}

TEST(ExplicitPrefetch, AllGathersAreIssuedInTheListedOrderInForwardAndBackward) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    ControlledRun plain = make_run(model, ctx.comm);
    ControlledRun listed = make_run(model, ctx.comm);
    // Forward: blocks.0 fetches blocks.2 and then blocks.1; backward: blocks.3 fetches
    // blocks.0 and then blocks.2 (the reverse of what the module order would suggest).
    listed.sharded->set_forward_prefetch(listed.module("blocks.0"),
                                         {&listed.module("blocks.2"), &listed.module("blocks.1")});
    listed.sharded->set_backward_prefetch(listed.module("blocks.3"),
                                          {&listed.module("blocks.0"), &listed.module("blocks.2")});
    auto batch = model.batch(0, ctx.rank);

    auto forward_backward = [&](ControlledRun& r, std::vector<std::string>* after_forward) {
      auto loss = model.loss(*r.net, batch);
      *after_forward = r.all_gathers;
      loss.backward();
    };
    std::vector<std::string> plain_forward, listed_forward;
    forward_backward(plain, &plain_forward);
    forward_backward(listed, &listed_forward);

    // Without prefetch each unit all-gathers when it runs: root, blocks in order, then
    // backward from the last block; the root stays unsharded until the end of backward.
    EXPECT_EQ(joined(plain.all_gathers),
              "root blocks.0 blocks.1 blocks.2 blocks.3 blocks.3 blocks.2 blocks.1 blocks.0");
    EXPECT_EQ(joined(plain_forward), "root blocks.0 blocks.1 blocks.2 blocks.3");
    // The lists: blocks.2 before blocks.1 right after blocks.0's own; in backward, blocks.0
    // before blocks.2 right after blocks.3's own, so blocks.2 and blocks.1 issue nothing more
    // in forward and blocks.0 and blocks.2 nothing more in backward.
    EXPECT_EQ(joined(listed_forward), "root blocks.0 blocks.2 blocks.1 blocks.3");
    EXPECT_EQ(joined(listed.all_gathers),
              "root blocks.0 blocks.2 blocks.1 blocks.3 blocks.3 blocks.0 blocks.2 blocks.1");
    EXPECT_EQ(listed.sharded->comm_stats(CollectiveKind::AllGather).calls,
              plain.sharded->comm_stats(CollectiveKind::AllGather).calls);
    expect_same_gradients(*plain.sharded, *listed.sharded);

    // An empty list gives the unit back its implicit prefetch (off here): module order again.
    listed.sharded->set_forward_prefetch(listed.module("blocks.0"), {});
    listed.sharded->set_backward_prefetch(listed.module("blocks.3"), {});
    listed.all_gathers.clear();
    model.loss(*listed.net, batch).backward();
    EXPECT_EQ(joined(listed.all_gathers), joined(plain.all_gathers));
  });
}

// The lists `fsdpp train --explicit-prefetch 1` sets (PyTorch's FSDP2 example): each block
// fetches the next in forward and the previous in backward. Every block is all-gathered once
// in forward and once in backward, each right after the one before it, and no more than two
// blocks are unsharded at once besides the root. The implicit prefetch stays on, as in
// `fsdpp train` (the root's own prefetch is the implicit one).
TEST(ExplicitPrefetch, NextAndPreviousBlockListsGatherEachBlockOncePerPassAndHoldTwoBlocks) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    ControlledRun plain = make_run(model, ctx.comm);
    ControlledRun listed = make_run(model, ctx.comm, /*implicit_prefetch=*/true);
    for (int i = 0; i < 4; ++i) {
      const auto block = [&](int j) { return &listed.module("blocks." + std::to_string(j)); };
      listed.sharded->set_forward_prefetch(*block(i),
                                           i < 3 ? std::vector{block(i + 1)} : std::vector<const torch::nn::Module*>{});
      listed.sharded->set_backward_prefetch(
          *block(i), i > 0 ? std::vector{block(i - 1)} : std::vector<const torch::nn::Module*>{});
    }
    auto batch = model.batch(0, ctx.rank);
    for (int step = 0; step < 2; ++step) {
      for (ControlledRun* r : {&plain, &listed}) {
        r->all_gathers.clear();
        model.loss(*r->net, batch).backward();
      }
      EXPECT_EQ(joined(listed.all_gathers),
                "root blocks.0 blocks.1 blocks.2 blocks.3 blocks.3 blocks.2 blocks.1 blocks.0")
          << "step " << step;
    }
    const int64_t block_bytes = listed.sharded->units().front()->full_param_bytes();
    const int64_t root_bytes = listed.sharded->units().back()->full_param_bytes();
    EXPECT_EQ(plain.sharded->memory().peak_unsharded_bytes, root_bytes + block_bytes);
    EXPECT_EQ(listed.sharded->memory().peak_unsharded_bytes, root_bytes + 2 * block_bytes);
    expect_same_gradients(*plain.sharded, *listed.sharded);
  });
}

TEST(ExplicitPrefetch, AModuleThatNoUnitWrapsIsRefusedNamingTheCall) {
  harness::expect_ranks_pass(1, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    ControlledRun r = make_run(model, ctx.comm);
    const auto& inner = *r.net->named_modules()["blocks.1"]->children().front();  // inside a unit, not one
    try {
      r.sharded->set_forward_prefetch(r.module("blocks.0"), {&inner});
      FAIL() << "a module inside a unit was accepted as a prefetch target";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("set_forward_prefetch"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not wrapped by an FSDP unit"), std::string::npos) << e.what();
    }
    EXPECT_THROW(r.sharded->set_backward_prefetch(inner, {}), std::invalid_argument);
  });
}

TEST(ReshardAfterForward, AUnitSetToFalseStaysUnshardedUntilItsBackwardAndSkipsItsSecondAllGather) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    ControlledRun plain = make_run(model, ctx.comm);
    ControlledRun kept = make_run(model, ctx.comm);
    kept.sharded->set_reshard_after_forward(kept.module("blocks.1"), false);
    auto batch = model.batch(0, ctx.rank);

    auto plain_loss = model.loss(*plain.net, batch);
    auto kept_loss = model.loss(*kept.net, batch);
    for (const auto& unit : kept.sharded->units()) {
      bool unsharded = unit->state() == fsdp::FsdpUnit::State::Unsharded;
      EXPECT_EQ(unsharded, unit->name() == "blocks.1" || unit->name() == "root") << unit->name();
    }
    plain_loss.backward();
    kept_loss.backward();
    EXPECT_TRUE(torch::equal(plain_loss, kept_loss));
    expect_same_gradients(*plain.sharded, *kept.sharded);

    // Backward all-gathers every block but blocks.1 again.
    EXPECT_EQ(joined(kept.all_gathers), "root blocks.0 blocks.1 blocks.2 blocks.3 blocks.3 blocks.2 blocks.0");
    EXPECT_EQ(kept.sharded->comm_stats(CollectiveKind::AllGather).calls,
              plain.sharded->comm_stats(CollectiveKind::AllGather).calls - 1);
    // The bytes held: without prefetch the root and the block in use, plus blocks.1 from
    // its forward until its backward, so the peak is the root, blocks.1 and the larger of
    // the blocks that run in between (blocks.2 and blocks.3).
    auto bytes = [&](const std::string& name) {
      for (const auto& unit : kept.sharded->units())
        if (unit->name() == name) return unit->full_param_bytes();
      ADD_FAILURE() << "no unit " << name;
      return int64_t{0};
    };
    int64_t largest_block = 0;
    for (const auto* name : {"blocks.0", "blocks.1", "blocks.2", "blocks.3"})
      largest_block = std::max(largest_block, bytes(name));
    EXPECT_EQ(plain.sharded->memory().peak_unsharded_bytes, bytes("root") + largest_block);
    EXPECT_EQ(kept.sharded->memory().peak_unsharded_bytes,
              bytes("root") + bytes("blocks.1") + std::max(bytes("blocks.2"), bytes("blocks.3")));
  });
}

TEST(ReshardAfterForward, TheRootCannotBeSetAndShardGradOpUnitsCanBeMadeToReshard) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    auto net = model.build(1);
    fsdp::FsdpOptions o;
    o.strategy = fsdp::ShardingStrategy::ShardGradOp;
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, o, model.wrap);
    try {
      sharded->set_reshard_after_forward(*net, true);
      FAIL() << "the root unit's reshard_after_forward was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("root unit"), std::string::npos) << e.what();
    }
    sharded->set_reshard_after_forward(*net->named_modules()["blocks.2"], true);
    auto loss = model.loss(*net, model.batch(0, ctx.rank));
    for (const auto& unit : sharded->units()) {
      bool unsharded = unit->state() == fsdp::FsdpUnit::State::Unsharded;
      EXPECT_EQ(unsharded, unit->name() != "blocks.2") << unit->name();
    }
    loss.backward();
  });
}

// One forward and backward of rank `ctx.rank`'s batch; the full gradients, by name.
std::vector<std::pair<std::string, torch::Tensor>> gradients_of(harness::RankContext& ctx,
                                                                const harness::EquivModel& model,
                                                                const fsdp::FsdpOptions& options) {
  auto net = model.build(1);
  auto sharded = fsdp::ShardedModel::create(net, ctx.comm, options, model.wrap);
  model.loss(*net, model.batch(0, ctx.rank)).backward();
  return sharded->gather_full_gradients();
}

// With a power-of-two world, dividing by the world size or the factor is exact, so the
// average scaled by N / factor is the divided sum bit for bit whatever order the ranks add in.
TEST(GradientDivideFactor, GradientsAreTheRanksSumDividedByTheFactorInEveryStrategy) {
  harness::expect_ranks_pass(4, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    for (auto strategy : {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp,
                          fsdp::ShardingStrategy::NoShard, fsdp::ShardingStrategy::HybridShard}) {
      fsdp::FsdpOptions o;
      o.strategy = strategy;
      auto average = gradients_of(ctx, model, o);
      for (double factor : {1.0, 8.0}) {
        o.gradient_divide_factor = factor;
        auto divided = gradients_of(ctx, model, o);
        ASSERT_EQ(divided.size(), average.size());
        ASSERT_FALSE(average.empty());
        for (size_t i = 0; i < average.size(); ++i) {
          ASSERT_TRUE(average[i].second.defined()) << average[i].first;
          EXPECT_TRUE(torch::equal(divided[i].second, average[i].second * (4.0 / factor)))
              << fsdp::to_string(strategy) << " factor " << factor << " " << average[i].first;
        }
      }
    }
  });
}

TEST(GradientDivideFactor, OneRanksUnshardedUnitsAreDividedToo) {
  harness::expect_ranks_pass(1, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    fsdp::FsdpOptions o;
    auto own = gradients_of(ctx, model, o);
    o.gradient_divide_factor = 2.0;
    auto halved = gradients_of(ctx, model, o);
    ASSERT_EQ(halved.size(), own.size());
    ASSERT_FALSE(own.empty());
    for (size_t i = 0; i < own.size(); ++i)
      EXPECT_TRUE(torch::equal(halved[i].second, own[i].second / 2)) << own[i].first;
  });
}

TEST(GradientDivideFactor, ANonPositiveFactorOrTheWorldSizeInvariantOrderIsRefused) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    auto refusal = [&](const fsdp::FsdpOptions& o) -> std::string {
      try {
        fsdp::ShardedModel::create(model.build(1), ctx.comm, o, model.wrap);
      } catch (const std::invalid_argument& e) {
        return e.what();
      }
      return "accepted";
    };
    for (double factor : {0.0, -2.0, std::nan("")}) {
      fsdp::FsdpOptions o;
      o.gradient_divide_factor = factor;
      EXPECT_NE(refusal(o).find("gradient_divide_factor must be a positive finite number"), std::string::npos)
          << factor;
    }
    fsdp::FsdpOptions o;
    o.gradient_divide_factor = 2.0;
    o.reduction_order = fsdp::ReductionOrder::WorldSizeInvariant;
    EXPECT_NE(refusal(o).find("WorldSizeInvariant"), std::string::npos) << refusal(o);
  });
}

}  // namespace
}  // namespace fsdpp
