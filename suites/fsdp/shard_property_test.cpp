// The sharding rule and shard/unshard round trips, as properties over random shapes and
// group sizes (RapidCheck), the packing of the reduce-scatter input, plus strategy names.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <numeric>
#include <utility>

#include "core/fsdp/fsdp_collectives.h"
#include "core/fsdp/fsdp_param.h"
#include "core/fsdp/sharding.h"

namespace fsdpp::fsdp {
namespace {

TEST(ShardLayout, RowsAreCeilDividedAndTheLastRanksHoldPadding) {
  auto five_on_four = ShardLayout::of({5, 3}, 4);
  EXPECT_EQ(five_on_four.shard_rows, 2);
  EXPECT_EQ(five_on_four.row_numel, 3);
  std::vector<int64_t> valid;
  valid.reserve(4);
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
    const std::string message = e.what();
    EXPECT_NE(message.find("'zero3'"), std::string::npos) << message;  // the bad name
    for (auto s : all_strategies()) EXPECT_NE(message.find(to_string(s)), std::string::npos) << message;
  }
}

// Shards of every rank, concatenated as an all-gather would deliver them, unshard back to
// the original; and a full gradient cut for reduce-scatter lands in the same places.
RC_GTEST_PROP(ShardRoundTrip, UnshardOfAllShardsIsTheOriginal, ()) {
  auto rank_count = *rc::gen::inRange(0, 4);
  std::vector<int64_t> shape;
  shape.reserve(rank_count);
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

// Parameters of random shapes (uneven rows: the last ranks hold padding), some without a
// gradient, bound to a unit's shard buffer at offsets in a random order of the parameters.
struct PackCase {
  int group = 1;
  int64_t shard_total = 0;
  std::vector<FsdpParam> params;
  std::vector<bool> has_grad;
  std::vector<at::Tensor> grads;  // bf16, as a backward in the compute dtype gives them
};

PackCase random_pack_case() {
  PackCase c;
  c.group = *rc::gen::inRange(1, 4);
  const int count = *rc::gen::inRange(1, 5);
  for (int i = 0; i < count; ++i) {
    const int dims = *rc::gen::inRange(0, 3);
    std::vector<int64_t> shape;
    shape.reserve(dims);
    for (int d = 0; d < dims; ++d) shape.push_back(*rc::gen::inRange(0, 8));
    c.params.emplace_back("p" + std::to_string(i), torch::randn(shape), c.group, 0, /*in_place=*/false);
    c.has_grad.push_back(*rc::gen::arbitrary<bool>());
    auto grad = torch::randn(shape).to(at::kBFloat16);
    // Values whose bits a cast could lose: a negative NaN with a payload, infinity.
    if (grad.numel() > 0 && *rc::gen::arbitrary<bool>()) {
      auto bits = grad.view({-1}).view(at::kShort);
      bits[*rc::gen::inRange<int64_t>(0, grad.numel())] = static_cast<int16_t>(0xFFC1);
      bits[*rc::gen::inRange<int64_t>(0, grad.numel())] = static_cast<int16_t>(0x7F80);
    }
    c.grads.push_back(c.has_grad.back() ? grad : at::Tensor());
    c.shard_total += c.params.back().layout().shard_numel();
  }
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  for (int i = count - 1; i > 0; --i) std::swap(order[i], order[*rc::gen::inRange(0, i + 1)]);  // Fisher-Yates
  auto flat = torch::zeros({c.shard_total});
  int64_t offset = 0;
  for (size_t i : order) {
    const int64_t numel = c.params[i].layout().shard_numel();
    c.params[i].bind_shard(flat.narrow(0, offset, numel), offset, at::kFloat);
    offset += numel;
  }
  return c;
}

// The reduce-scatter input is allocated uninitialised; every element that is not a
// gradient row (padding rows, parameters without a gradient) must still be zero, and the
// rows are the bf16 gradients cast to fp32 as they are copied in, piece by piece: bit for
// bit a zero-filled buffer with each whole gradient cast first and copied in.
RC_GTEST_PROP(ReduceScatterInput, IsEveryRanksGradientRowsInPlaceAndZeroElsewhere, ()) {
  auto c = random_pack_case();
  auto expected = torch::zeros({c.shard_total * c.group});
  for (size_t i = 0; i < c.params.size(); ++i)
    if (c.has_grad[i]) c.params[i].copy_in_grad(c.grads[i].to(at::kFloat), expected, c.shard_total);
  auto accumulated = c.grads;
  // A same-sized block of NaN, freed just before: the allocator is likely to hand it back
  // to the uninitialised buffer, so that a zero missed shows as NaN, not as lucky zeros.
  { const auto freed = torch::full({c.shard_total * c.group}, NAN); }
  auto input = reduce_scatter_input(c.params, accumulated, c.has_grad, c.shard_total, c.group,
                                    torch::TensorOptions().dtype(at::kFloat));
  // Compared as bits, so that NaN payloads count too.
  RC_ASSERT(torch::equal(input.view(at::kInt), expected.view(at::kInt)));
  for (const auto& g : accumulated) RC_ASSERT(!g.defined());  // moved out: reduced now
}

TEST(ReduceScatterInput, OverlappingShardsAreALogicError) {
  std::vector<FsdpParam> params;
  params.emplace_back("a", torch::randn({4}), 1, 0, /*in_place=*/false);
  params.emplace_back("b", torch::randn({4}), 1, 0, /*in_place=*/false);
  auto flat = torch::zeros({6});
  params[0].bind_shard(flat.narrow(0, 0, 4), 0, at::kFloat);
  params[1].bind_shard(flat.narrow(0, 2, 4), 2, at::kFloat);
  std::vector<at::Tensor> grads = {torch::ones({4}), torch::ones({4})};
  EXPECT_THROW(reduce_scatter_input(params, grads, {true, true}, 6, 1, torch::TensorOptions()), std::logic_error);
}

TEST(ShardRoundTrip, AnInPlaceGroupOfOneShardsNothing) {
  auto t = torch::randn({3, 2});
  FsdpParam p("p", t, 1, 0, /*in_place=*/true);
  EXPECT_TRUE(p.replicated());
  EXPECT_TRUE(p.sharded().is_same(t));
}

}  // namespace
}  // namespace fsdpp::fsdp
