// Memory and communication of the sharded model against the analytic ZeRO volumes.
//
// With N ranks and a unit u of padded size P_u = N * sum_p ceil(dim0_p / N) * row_p * 4
// bytes (fp32), one training step sends, per rank:
//   FULL_SHARD:     all-gather (N-1)/N * (2 * sum_{u != root} P_u + P_root)
//                   (the root stays unsharded from forward to backward, as in FSDP2)
//                   reduce-scatter (N-1)/N * sum_u P_u
//   SHARD_GRAD_OP:  all-gather (N-1)/N * sum_u P_u; reduce-scatter as above
//   NO_SHARD:       all-reduce 2 (N-1)/N * sum_u F_u, F_u = the unit's parameter bytes
//                   rounded up to a multiple of N elements; nothing else
// and holds sum_u P_u / N bytes of parameter shards: the unsharded size / N plus padding.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "core/fsdp/sharded_model.h"
#include "harness/testing/equivalence_check.h"

namespace fsdpp {
namespace {

using comm::CollectiveKind;
using fsdp::ShardingStrategy;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// P_u for every unit, from the parameters' shapes alone.
std::vector<int64_t> padded_unit_bytes(fsdp::ShardedModel& m, int n) {
  std::vector<int64_t> out;
  for (auto& unit : m.units()) {
    int64_t bytes = 0;
    for (auto& p : unit->params()) {
      auto shape = p.shape();
      int64_t dim0 = shape.empty() ? 1 : shape[0], row = 1;
      for (size_t i = 1; i < shape.size(); ++i) row *= shape[i];
      bytes += n * ceil_div(dim0, n) * row * 4;
    }
    out.push_back(bytes);
  }
  return out;
}

// Runs two training steps, measuring the second.
void train_two_steps(fsdp::ShardedModel& sharded, torch::nn::Module& net, const harness::EquivModel& model, int rank) {
  torch::optim::AdamW opt(sharded.parameters(), torch::optim::AdamWOptions(1e-3));
  for (int step = 0; step < 2; ++step) {
    if (step == 1) sharded.reset_comm_stats();
    opt.zero_grad();
    model.loss(net, model.batch(step, rank)).backward();
    opt.step();
  }
}

models::TinyTransformerConfig medium() {
  models::TinyTransformerConfig c;
  c.vocab = 1000;  // rows divide by 2 and 4; by 3 with 2 rows of padding
  c.dim = 96;      // every matrix's rows divide by 2, 3 and 4
  c.heads = 4;
  c.layers = 4;
  c.seq_len = 24;
  return c;
}

class Volumes : public ::testing::TestWithParam<int> {};

TEST_P(Volumes, FullShardSendsTwoAllGathersAndOneReduceScatterOfTheParameters) {
  harness::expect_ranks_pass(GetParam(), [](harness::RankContext& ctx) {
    const int n = ctx.world_size;
    auto model = harness::tiny_transformer_case();
    auto net = model.build(1);
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, {}, model.wrap);
    train_two_steps(*sharded, *net, model, ctx.rank);
    auto p = padded_unit_bytes(*sharded, n);
    int64_t all = 0, non_root = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      all += p[i];
      if (i + 1 < p.size()) non_root += p[i];
    }
    int64_t root = p.back();
    EXPECT_EQ(sharded->comm_stats(CollectiveKind::AllGather).bytes_sent, (2 * non_root + root) / n * (n - 1));
    EXPECT_EQ(sharded->comm_stats(CollectiveKind::ReduceScatter).bytes_sent, all / n * (n - 1));
    EXPECT_EQ(sharded->comm_stats(CollectiveKind::AllReduce).calls, 0);
  });
}

TEST_P(Volumes, ShardGradOpSendsOneAllGatherFewer) {
  harness::expect_ranks_pass(GetParam(), [](harness::RankContext& ctx) {
    const int n = ctx.world_size;
    auto model = harness::tiny_transformer_case();
    auto net = model.build(1);
    fsdp::FsdpOptions o;
    o.strategy = ShardingStrategy::ShardGradOp;
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, o, model.wrap);
    train_two_steps(*sharded, *net, model, ctx.rank);
    int64_t all = 0;
    for (auto b : padded_unit_bytes(*sharded, n)) all += b;
    EXPECT_EQ(sharded->comm_stats(CollectiveKind::AllGather).bytes_sent, all / n * (n - 1));
    EXPECT_EQ(sharded->comm_stats(CollectiveKind::ReduceScatter).bytes_sent, all / n * (n - 1));
  });
}

TEST_P(Volumes, NoShardSendsOneAllReduceOfTheGradients) {
  harness::expect_ranks_pass(GetParam(), [](harness::RankContext& ctx) {
    const int n = ctx.world_size;
    auto model = harness::tiny_transformer_case();
    auto net = model.build(1);
    fsdp::FsdpOptions o;
    o.strategy = ShardingStrategy::NoShard;
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, o, model.wrap);
    train_two_steps(*sharded, *net, model, ctx.rank);
    int64_t flat = 0;
    for (auto& unit : sharded->units()) {
      int64_t numel = 0;
      for (auto& p : unit->params()) numel += p.full_numel();
      flat += ceil_div(numel, n) * n * 4;
    }
    EXPECT_EQ(sharded->comm_stats(CollectiveKind::AllReduce).bytes_sent, 2 * flat / n * (n - 1));
    EXPECT_EQ(sharded->comm_stats(CollectiveKind::AllReduce).calls, static_cast<int64_t>(sharded->units().size()));
    EXPECT_EQ(sharded->comm_stats(CollectiveKind::AllGather).calls, 0);
    EXPECT_EQ(sharded->comm_stats(CollectiveKind::ReduceScatter).calls, 0);
  });
}

TEST_P(Volumes, PersistentParameterBytesAreTheUnshardedSizeOverNPlusPadding) {
  harness::expect_ranks_pass(GetParam(), [](harness::RankContext& ctx) {
    const int n = ctx.world_size;
    auto model = harness::tiny_transformer_case(medium());
    auto sharded = fsdp::ShardedModel::create(model.build(1), ctx.comm, {}, model.wrap);
    auto mem = sharded->memory();
    int64_t padded = 0;
    for (auto b : padded_unit_bytes(*sharded, n)) padded += b;
    EXPECT_EQ(mem.shard_bytes, padded / n);
    // Real rows over all ranks add up to the model exactly; padding is the rest.
    auto real = torch::tensor({mem.shard_bytes - mem.padding_bytes}, torch::kLong);
    ctx.comm.all_reduce(real, comm::ReduceOp::Sum);
    EXPECT_EQ(real.item<int64_t>(), mem.full_param_bytes);
    double ideal = static_cast<double>(mem.full_param_bytes) / n;
    EXPECT_LE(std::abs(mem.shard_bytes - ideal), 0.01 * ideal) << "shard " << mem.shard_bytes << " vs " << ideal;
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Volumes, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(Volumes, AWorldOfOneRunsNoCollectivesAtAll) {
  harness::expect_ranks_pass(1, [](harness::RankContext& ctx) {
    for (auto strategy : fsdp::all_strategies()) {
      auto model = harness::tiny_transformer_case();
      auto net = model.build(1);
      fsdp::FsdpOptions o;
      o.strategy = strategy;
      auto sharded = fsdp::ShardedModel::create(net, ctx.comm, o, model.wrap);
      torch::optim::AdamW opt(sharded->parameters(), torch::optim::AdamWOptions(1e-3));
      for (int step = 0; step < 2; ++step) {
        opt.zero_grad();
        model.loss(*net, model.batch(step, 0)).backward();
        sharded->clip_grad_norm(1.0);
        opt.step();
      }
      for (auto kind : {CollectiveKind::AllGather, CollectiveKind::ReduceScatter, CollectiveKind::AllReduce,
                        CollectiveKind::Broadcast, CollectiveKind::AllToAll, CollectiveKind::Barrier})
        EXPECT_EQ(sharded->comm_stats(kind).calls, 0) << fsdp::to_string(strategy) << " " << comm::to_string(kind);
    }
  });
}

// With one all-gather in flight, FULL_SHARD holds at most the root (unsharded all along),
// the block in use and the one prefetched; and prefetching happens: at some moment a second
// block is unsharded beside the one in use. Without prefetch, one block at a time.
TEST(Volumes, FullShardKeepsAtMostTheInFlightUnitsUnshardedAndPrefetchesTheNext) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    for (bool prefetch : {true, false}) {
      auto model = harness::tiny_transformer_case(medium());
      auto net = model.build(1);
      fsdp::FsdpOptions o;
      o.max_inflight_all_gathers = 1;
      o.forward_prefetch = prefetch;
      o.backward_prefetch = prefetch ? fsdp::BackwardPrefetch::Pre : fsdp::BackwardPrefetch::None;
      auto sharded = fsdp::ShardedModel::create(net, ctx.comm, o, model.wrap);
      model.loss(*net, model.batch(0, ctx.rank)).backward();
      model.loss(*net, model.batch(1, ctx.rank)).backward();  // the second iteration prefetches forward too
      auto mem = sharded->memory();
      int64_t largest_block = 0, smallest_block = std::numeric_limits<int64_t>::max();
      for (size_t i = 0; i + 1 < sharded->units().size(); ++i) {
        largest_block = std::max(largest_block, sharded->units()[i]->memory().full_param_bytes);
        smallest_block = std::min(smallest_block, sharded->units()[i]->memory().full_param_bytes);
      }
      int64_t root = sharded->units().back()->memory().full_param_bytes;
      if (prefetch) {
        EXPECT_LE(mem.peak_unsharded_bytes, root + 2 * largest_block);
        EXPECT_GE(mem.peak_unsharded_bytes, root + 2 * smallest_block) << "no block was ever prefetched";
      } else {
        EXPECT_EQ(mem.peak_unsharded_bytes, root + largest_block);
      }
      EXPECT_LT(mem.peak_unsharded_bytes, mem.full_param_bytes);
    }
  });
}

}  // namespace
}  // namespace fsdpp
