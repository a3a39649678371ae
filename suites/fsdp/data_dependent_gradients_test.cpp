// FsdpOptions::gradients_may_differ_across_ranks (a mixture of experts): ranks differ in
// which parameters of one unit got a gradient. The reduced gradient is what one process
// gets from the mean of the ranks' losses: an expert one rank used gets that rank's share,
// and an expert no rank used has no gradient at all, as in the unsharded model.
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

// Three experts and a head in one unit (the root): a call picks one expert.
struct ExpertsImpl : torch::nn::Module {
  torch::nn::Linear e0{nullptr}, e1{nullptr}, e2{nullptr}, head{nullptr};
  ExpertsImpl() {
    torch::manual_seed(5);
    e0 = register_module("e0", torch::nn::Linear(6, 6));
    e1 = register_module("e1", torch::nn::Linear(6, 6));
    e2 = register_module("e2", torch::nn::Linear(6, 6));
    head = register_module("head", torch::nn::Linear(6, 1));
  }
  at::Tensor forward(at::Tensor x, int64_t expert) {
    torch::nn::Linear chosen = expert == 0 ? e0 : expert == 1 ? e1 : e2;
    return head->forward(chosen->forward(x).tanh()).sum();
  }
};
TORCH_MODULE(Experts);

at::Tensor expert_input(int rank) {
  torch::manual_seed(100 + rank);
  return torch::randn({3, 6});
}

// One process: the mean of rank 0's loss (expert 0) and rank 1's (expert 1); e2 unused.
std::map<std::string, at::Tensor> mean_loss_gradients() {
  Experts net;
  ((net->forward(expert_input(0), 0) + net->forward(expert_input(1), 1)) / 2).backward();
  std::map<std::string, at::Tensor> out;
  for (const auto& item : net->named_parameters())
    out[item.key()] = item.value().grad().defined() ? item.value().grad().clone() : at::Tensor();
  return out;
}

void expect_union_of_gradients(fsdp::ShardingStrategy strategy) {
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    const auto expected = mean_loss_gradients();
    ASSERT_FALSE(expected.at("e2.weight").defined());
    Experts net;
    fsdp::FsdpOptions o;
    o.strategy = strategy;
    o.gradients_may_differ_across_ranks = true;
    auto sharded = fsdp::ShardedModel::create(net.ptr(), ctx.comm, o, fsdp::wrap_nothing());
    for (int step = 0; step < 2; ++step) {
      for (auto& p : sharded->parameters()) p.mutable_grad() = at::Tensor();
      nn::call(net, expert_input(ctx.rank), static_cast<int64_t>(ctx.rank)).backward();
      auto got = sharded->gather_full_gradients();
      ASSERT_EQ(got.size(), expected.size());
      for (const auto& [name, g] : got) {
        const at::Tensor& want = expected.at(name);
        if (!want.defined()) {
          EXPECT_FALSE(g.defined()) << "step " << step << " " << name << ": no rank used it, yet it has a gradient";
          continue;
        }
        ASSERT_TRUE(g.defined()) << "step " << step << " " << name;
        const auto verdict = harness::compare(g, want);
        EXPECT_TRUE(verdict.ok) << "step " << step << " " << name << ": " << verdict.describe();
      }
    }
  });
}

TEST(DataDependentGradients, EachRanksExpertGetsItsShareAndAnUnusedExpertNoneInFullShard) {
  expect_union_of_gradients(fsdp::ShardingStrategy::FullShard);
}

TEST(DataDependentGradients, EachRanksExpertGetsItsShareAndAnUnusedExpertNoneInShardGradOp) {
  expect_union_of_gradients(fsdp::ShardingStrategy::ShardGradOp);
}

TEST(DataDependentGradients, EachRanksExpertGetsItsShareAndAnUnusedExpertNoneInNoShard) {
  expect_union_of_gradients(fsdp::ShardingStrategy::NoShard);
}

}  // namespace
}  // namespace fsdpp
