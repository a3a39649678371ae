// FSDP2's controls: explicit forward and backward prefetch lists
// (set_modules_to_forward_prefetch / set_modules_to_backward_prefetch) and a unit's own
// reshard_after_forward, which change when all-gathers run and never what is computed; and
// the gradient divide factor (set_gradient_divide_factor).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/fsdp/sharded_model.h"
#include "core/nn/module_hooks.h"
#include "harness/equiv/equivalence.h"
#include "harness/oracle/tolerance.h"
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

// a, then b on a's output (discarded: b never runs backward), then c on a's output, then a head.
struct DeadBranchImpl : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr}, head{nullptr};
  DeadBranchImpl() {
    torch::manual_seed(2);
    a = register_module("a", torch::nn::Linear(8, 8));
    b = register_module("b", torch::nn::Linear(8, 8));
    c = register_module("c", torch::nn::Linear(8, 8));
    head = register_module("head", torch::nn::Linear(8, 1));
  }
  at::Tensor forward(at::Tensor x) {
    x = nn::call(a, x).tanh();
    aux_input = x.detach();
    aux = nn::call(b, x).detach();  // an auxiliary output nobody uses
    return head->forward(nn::call(c, x).tanh()).sum();
  }
  at::Tensor aux_input, aux;
};
TORCH_MODULE(DeadBranch);

fsdp::WrapPolicy wrap_a_b_c() {
  return fsdp::wrap_by_predicate([](const fsdp::WrapCandidate& w) {
    return w.qualified_name == "a" || w.qualified_name == "b" || w.qualified_name == "c";
  });
}

// BackwardPrefetch::None: a unit is all-gathered in backward only when its own backward
// runs, so b, which runs forward but never backward, is not gathered after c's backward
// (c's successor in reverse forward order). Pre prefetches it there, as FSDP2 does.
TEST(ImplicitPrefetch, WithoutBackwardPrefetchOnlyUnitsThatRunBackwardAreGatheredInBackward) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    for (auto mode : {fsdp::BackwardPrefetch::None, fsdp::BackwardPrefetch::Pre}) {
      DeadBranch net;
      fsdp::FsdpOptions o;
      o.forward_prefetch = false;
      o.backward_prefetch = mode;
      auto sharded = fsdp::ShardedModel::create(net.ptr(), ctx.comm, o, wrap_a_b_c());
      std::vector<std::string> gathers;
      sharded->set_all_gather_listener([&gathers](const fsdp::FsdpUnit& u) { gathers.push_back(u.name()); });
      torch::manual_seed(7);
      nn::call(net, torch::randn({4, 8})).backward();
      const std::string backward = mode == fsdp::BackwardPrefetch::None ? "c a" : "c b a";
      EXPECT_EQ(joined(gathers), "root a b c " + backward) << (mode == fsdp::BackwardPrefetch::None ? "None" : "Pre");
    }
  });
}

// Pre prefetches b in backward, but b's backward never runs: its all-gather is dropped at the
// end of backward, so the next forward gathers b again from the shards the optimizer changed
// (and never computes with the weights from before the step).
TEST(ImplicitPrefetch, APrefetchNoBackwardUsedIsDroppedSoTheNextForwardSeesTheStep) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    DeadBranch net;
    fsdp::FsdpOptions o;
    o.backward_prefetch = fsdp::BackwardPrefetch::Pre;
    auto sharded = fsdp::ShardedModel::create(net.ptr(), ctx.comm, o, wrap_a_b_c());
    torch::optim::SGD opt(sharded->parameters(), torch::optim::SGDOptions(0.5));
    torch::manual_seed(7);
    const auto x = torch::randn({4, 8});
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      const auto loss = nn::call(net, x);
      std::map<std::string, at::Tensor> full;
      for (auto& [name, value] : sharded->gather_full_parameters()) full[name] = value;
      const auto expected = torch::nn::functional::linear(net->aux_input, full.at("b.weight"), full.at("b.bias"));
      const auto verdict = harness::compare(net->aux, expected);
      EXPECT_TRUE(verdict.ok) << "step " << step << ": b computed with other weights: " << verdict.describe();
      loss.backward();
      // b gets no gradient, so give it one: the step must change its shard.
      for (auto& p : sharded->parameters())
        if (!p.grad().defined()) p.mutable_grad() = torch::ones_like(p);
      opt.step();
    }
  });
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

namespace fsdpp {
namespace {

// K micro-steps' backward on a world-size-invariant model, gradient sync on for every one or
// only the last (FSDP2's set_requires_gradient_sync(False) on the others); the all-to-alls
// (the invariant order's reduce-scatter) the step sent, and the full gradients.
struct AccumulatedStep {
  int64_t all_to_alls = 0;
  std::vector<std::pair<std::string, torch::Tensor>> gradients;
};

AccumulatedStep accumulate(harness::RankContext& ctx, const harness::EquivModel& model, fsdp::ShardingStrategy strategy,
                           int micro_steps, bool sync_every_micro_step) {
  auto net = model.build(1);
  fsdp::FsdpOptions o;
  o.strategy = strategy;
  o.hybrid_shard_size = 2;  // HYBRID_SHARD on 4 ranks: 2 x 2
  o.reduction_order = fsdp::ReductionOrder::WorldSizeInvariant;
  auto sharded = fsdp::ShardedModel::create(net, ctx.comm, o, model.wrap);
  sharded->reset_comm_stats();
  for (int micro = 0; micro < micro_steps; ++micro) {
    sharded->set_requires_gradient_sync(sync_every_micro_step || micro == micro_steps - 1);
    model.loss(*net, model.batch(micro, ctx.rank)).backward();
  }
  AccumulatedStep step;
  step.all_to_alls = sharded->comm_stats(CollectiveKind::AllToAll).calls;
  step.gradients = sharded->gather_full_gradients();
  return step;
}

TEST(GradientSync, OffForAllButTheLastMicroStepSendsOneAllToAllPerUnitAndTheSameBitsInTheInvariantOrder) {
  harness::expect_ranks_pass(4, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    constexpr int kMicroSteps = 3;
    for (auto strategy : {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp,
                          fsdp::ShardingStrategy::NoShard, fsdp::ShardingStrategy::HybridShard}) {
      const auto every = accumulate(ctx, model, strategy, kMicroSteps, true);
      const auto last = accumulate(ctx, model, strategy, kMicroSteps, false);
      const auto units =
          static_cast<int64_t>(fsdp::ShardedModel::create(model.build(1), ctx.comm, {}, model.wrap)->units().size());
      EXPECT_EQ(every.all_to_alls, kMicroSteps * units) << fsdp::to_string(strategy);
      EXPECT_EQ(last.all_to_alls, units) << fsdp::to_string(strategy);
      ASSERT_EQ(last.gradients.size(), every.gradients.size());
      ASSERT_FALSE(every.gradients.empty());
      for (size_t i = 0; i < every.gradients.size(); ++i) {
        ASSERT_TRUE(every.gradients[i].second.defined()) << every.gradients[i].first;
        EXPECT_TRUE(torch::equal(last.gradients[i].second, every.gradients[i].second))
            << fsdp::to_string(strategy) << " " << every.gradients[i].first;
      }
    }
  });
}

}  // namespace
}  // namespace fsdpp

namespace fsdpp {
namespace {

// The padded all-gather buffer of a unit, in bytes: S rank chunks of shard_total elements.
int64_t gathered_bytes(const fsdp::FsdpUnit& unit, int shard_size) {
  return unit.shard_total() * shard_size * static_cast<int64_t>(sizeof(float));
}

// FSDP2's reshard_after_forward=2 on 4 ranks (ZeRO++'s hpZ): blocks.1 keeps half of its
// gathered buffer after its forward (SHARDED_POST_FORWARD) and gathers the rest in backward
// from the one other rank of its pair; the same bytes, so the same gradients, bit for bit.
TEST(ReshardAfterForwardToAGroup, AUnitKeepsItsPieceAndGathersInBackwardWithinItsGroupTheSameBits) {
  harness::expect_ranks_pass(4, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    ControlledRun plain = make_run(model, ctx.comm);
    ControlledRun hpz = make_run(model, ctx.comm);
    hpz.sharded->set_reshard_after_forward(hpz.module("blocks.1"), 2);
    auto batch = model.batch(0, ctx.rank);
    plain.sharded->reset_comm_stats();
    hpz.sharded->reset_comm_stats();

    auto plain_loss = model.loss(*plain.net, batch);
    auto hpz_loss = model.loss(*hpz.net, batch);
    const fsdp::FsdpUnit* held = nullptr;
    for (const auto& unit : hpz.sharded->units())
      if (unit->name() == "blocks.1") held = unit.get();
    ASSERT_NE(held, nullptr);
    EXPECT_EQ(held->state(), fsdp::FsdpUnit::State::ShardedPostForward);
    EXPECT_EQ(held->post_forward_bytes(), gathered_bytes(*held, 4) / 2);
    plain_loss.backward();
    hpz_loss.backward();
    EXPECT_EQ(held->state(), fsdp::FsdpUnit::State::Sharded);
    EXPECT_EQ(held->post_forward_bytes(), 0);
    EXPECT_TRUE(torch::equal(plain_loss, hpz_loss));
    expect_same_gradients(*plain.sharded, *hpz.sharded);

    // The same all-gathers, in the same order; blocks.1's backward one sends its half
    // once (to its pair) instead of its quarter three times.
    EXPECT_EQ(joined(hpz.all_gathers), joined(plain.all_gathers));
    const auto sent = [](const ControlledRun& r) {
      return r.sharded->comm_stats(CollectiveKind::AllGather).bytes_sent;
    };
    const int64_t buffer = gathered_bytes(*held, 4);
    EXPECT_EQ(sent(plain) - sent(hpz), 3 * buffer / 4 - buffer / 2);
    // The half held from blocks.1's forward to its backward shows in the peak.
    EXPECT_EQ(hpz.sharded->memory().peak_unsharded_bytes - plain.sharded->memory().peak_unsharded_bytes, buffer / 2);
  });
}

TEST(ReshardAfterForwardToAGroup, AGroupSizeThatDoesNotDivideTheShardGroupOrIsTrivialIsRefused) {
  harness::expect_ranks_pass(4, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case(four_blocks());
    ControlledRun r = make_run(model, ctx.comm);
    for (int size : {0, 1, 3, 4, 8}) {
      try {
        r.sharded->set_reshard_after_forward(r.module("blocks.0"), size);
        ADD_FAILURE() << "group size " << size << " was accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("must divide the shard group size 4"), std::string::npos) << e.what();
      }
    }
    EXPECT_THROW(r.sharded->set_reshard_after_forward(*r.net, 2), std::invalid_argument);  // the root
  });
}

}  // namespace
}  // namespace fsdpp
