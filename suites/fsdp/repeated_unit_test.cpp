// A unit whose module runs more than once in one forward (a weight-shared layer, as a
// universal transformer or a tied encoder block): its gradient is the sum over every run,
// as autograd gives the unsharded module, and the implicit prefetch follows each run.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "core/fsdp/sharded_model.h"
#include "core/nn/module_hooks.h"
#include "harness/oracle/tolerance.h"
#include "harness/testing/multirank.h"

namespace fsdpp {
namespace {

// a, b, then a again, then a head: `a` runs twice.
struct AbaImpl : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, head{nullptr};
  AbaImpl() {
    torch::manual_seed(3);
    a = register_module("a", torch::nn::Linear(8, 8));
    b = register_module("b", torch::nn::Linear(8, 8));
    head = register_module("head", torch::nn::Linear(8, 1));
  }
  at::Tensor forward(at::Tensor x) {
    x = nn::call(a, x).tanh();
    x = nn::call(b, x).tanh();
    x = nn::call(a, x).tanh();
    return head->forward(x).sum();
  }
};
TORCH_MODULE(Aba);

fsdp::WrapPolicy wrap_a_and_b() {
  return fsdp::wrap_by_predicate(
      [](const fsdp::WrapCandidate& c) { return c.qualified_name == "a" || c.qualified_name == "b"; });
}

at::Tensor input() {
  torch::manual_seed(11);
  return torch::randn({4, 8});
}

std::map<std::string, at::Tensor> unsharded_gradients() {
  Aba net;
  net->forward(input()).backward();
  std::map<std::string, at::Tensor> out;
  for (const auto& item : net->named_parameters()) out[item.key()] = item.value().grad().clone();
  return out;
}

void expect_gradients_of_every_run(fsdp::ShardingStrategy strategy, bool implicit_prefetch) {
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    const auto expected = unsharded_gradients();
    Aba net;
    fsdp::FsdpOptions o;
    o.strategy = strategy;
    o.forward_prefetch = implicit_prefetch;
    o.backward_prefetch = implicit_prefetch ? fsdp::BackwardPrefetch::Pre : fsdp::BackwardPrefetch::None;
    auto sharded = fsdp::ShardedModel::create(net.ptr(), ctx.comm, o, wrap_a_and_b());
    for (int step = 0; step < 2; ++step) {  // the second step prefetches from the first's order
      for (auto& p : sharded->parameters()) p.mutable_grad() = at::Tensor();
      nn::call(net, input()).backward();  // through the root's hooks
      auto got = sharded->gather_full_gradients();
      ASSERT_EQ(got.size(), expected.size());
      for (const auto& [name, g] : got) {
        ASSERT_TRUE(g.defined()) << name;
        const auto verdict = harness::compare(g, expected.at(name));
        EXPECT_TRUE(verdict.ok) << "step " << step << " " << name << ": " << verdict.describe();
      }
    }
  });
}

TEST(RepeatedUnit, GradientsSumEveryRunInFullShard) {
  expect_gradients_of_every_run(fsdp::ShardingStrategy::FullShard, false);
}

TEST(RepeatedUnit, GradientsSumEveryRunInShardGradOp) {
  expect_gradients_of_every_run(fsdp::ShardingStrategy::ShardGradOp, false);
}

TEST(RepeatedUnit, GradientsSumEveryRunWithTheImplicitPrefetch) {
  expect_gradients_of_every_run(fsdp::ShardingStrategy::FullShard, true);
}

// The implicit prefetch with `a` running twice (FULL_SHARD, 2 ranks): each all-gather is
// logged as "unit:N", N the units already unsharded or gathering when it was issued, so a
// prefetch (issued while the unit before it still holds its parameters) reads 2 where an
// all-gather on demand reads 1. On the first step the forward prefetch follows module order
// (root, a, b): `a` fetches `b`. In backward, the first backward of `a` is that of its second
// run, which fetches `b` (the unit before that run), and `b` fetches `a` again for its first
// run; the first run's backward has nothing before it to fetch.
TEST(RepeatedUnit, PrefetchFollowsEachRunOnTheFirstStepAndInBackward) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    Aba net;
    fsdp::FsdpOptions o;
    auto sharded = fsdp::ShardedModel::create(net.ptr(), ctx.comm, o, wrap_a_and_b());
    std::vector<std::string> issued;
    sharded->set_all_gather_listener([&](const fsdp::FsdpUnit& unit) {
      int held = 0;
      for (const auto& other : sharded->units())
        held += other->state() == fsdp::FsdpUnit::State::Unsharded || other->unshard_in_flight();
      issued.push_back(unit.name() + ":" + std::to_string(held));
    });
    auto forward = nn::call(net, input());
    EXPECT_EQ(testing::PrintToString(issued),
              testing::PrintToString(std::vector<std::string>{"root:0", "a:1", "b:2", "a:1"}));
    issued.clear();
    forward.backward();
    EXPECT_EQ(testing::PrintToString(issued), testing::PrintToString(std::vector<std::string>{"a:1", "b:2", "a:2"}));
  });
}

}  // namespace
}  // namespace fsdpp
