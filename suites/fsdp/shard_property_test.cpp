// The sharding rule and shard/unshard round trips, as properties over random shapes and
// group sizes (RapidCheck), plus strategy names.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <torch/torch.h>

#include "core/fsdp/fsdp_param.h"
#include "core/fsdp/sharding.h"

namespace fsdpp::fsdp {
namespace {

TEST(ShardLayout, RowsAreCeilDividedAndTheLastRanksHoldPadding) {
  auto five_on_four = ShardLayout::of({5, 3}, 4);
  EXPECT_EQ(five_on_four.shard_rows, 2);
  EXPECT_EQ(five_on_four.row_numel, 3);
  std::vector<int64_t> valid;
  for (int r = 0; r < 4; ++r) valid.push_back(five_on_four.valid_rows(r));
  EXPECT_EQ(valid, (std::vector<int64_t>{2, 2, 1, 0}));
  auto two_on_four = ShardLayout::of({2}, 4);
  EXPECT_EQ(two_on_four.shard_rows, 1);
  EXPECT_EQ(two_on_four.valid_rows(2), 0);
  auto scalar = ShardLayout::of({}, 3);
  EXPECT_EQ(scalar.dim0, 1);
  EXPECT_EQ(scalar.valid_rows(0), 1);
  EXPECT_EQ(scalar.valid_rows(1), 0);
}

TEST(Strategies, NamesParseCaseInsensitivelyAndBadOnesAreListed) {
  for (auto s : all_strategies()) EXPECT_EQ(parse_strategy(to_string(s)), s);
  EXPECT_EQ(parse_strategy("FULL_SHARD"), ShardingStrategy::FullShard);
  EXPECT_EQ(parse_strategy("Hybrid_Shard_Zero2"), ShardingStrategy::HybridShardZero2);
  try {
    parse_strategy("zero3");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("full_shard, shard_grad_op"), std::string::npos);
  }
}

// Shards of every rank, concatenated as an all-gather would deliver them, unshard back to
// the original; and a full gradient cut for reduce-scatter lands in the same places.
RC_GTEST_PROP(ShardRoundTrip, UnshardOfAllShardsIsTheOriginal, ()) {
  auto rank_count = *rc::gen::inRange(0, 4);
  std::vector<int64_t> shape;
  for (int i = 0; i < rank_count; ++i) shape.push_back(*rc::gen::inRange(0, 9));
  const int group = *rc::gen::inRange(2, 6);
  auto original = torch::randn(shape);
  auto layout = ShardLayout::of(shape, group);
  auto gathered = torch::empty({layout.shard_numel() * group});
  std::vector<at::Tensor> shard_buffers;
  for (int r = 0; r < group; ++r) {
    FsdpParam p("p", original.clone(), group, r, /*in_place=*/false);
    auto buffer = torch::full({layout.shard_numel()}, 7.0f);  // garbage the rule must overwrite
    p.bind_shard(buffer, 0, at::kFloat);
    RC_ASSERT(!p.unsharded_allocated() || p.full_numel() == 0);
    RC_ASSERT(p.sharded().size(0) == layout.valid_rows(r));
    gathered.narrow(0, r * layout.shard_numel(), layout.shard_numel()).copy_(buffer);
    shard_buffers.push_back(buffer);
  }
  FsdpParam probe("p", original.clone(), group, 0, /*in_place=*/false);
  auto rebuilt = torch::empty(shape);
  probe.copy_out(gathered, layout.shard_numel(), rebuilt);
  RC_ASSERT(torch::equal(rebuilt, original));
  auto cut = torch::zeros({layout.shard_numel() * group});
  probe.copy_in_grad(original, cut, layout.shard_numel());
  RC_ASSERT(torch::equal(cut, gathered));  // padding rows are zero in both
}

TEST(ShardRoundTrip, AnInPlaceGroupOfOneShardsNothing) {
  auto t = torch::randn({3, 2});
  FsdpParam p("p", t, 1, 0, /*in_place=*/true);
  EXPECT_TRUE(p.replicated());
  EXPECT_TRUE(p.sharded().is_same(t));
}

}  // namespace
}  // namespace fsdpp::fsdp
