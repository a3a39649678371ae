#include "core/fsdp/sharding.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace fsdpp::fsdp {

const std::vector<ShardingStrategy>& all_strategies() {
  static const std::vector<ShardingStrategy> all = {ShardingStrategy::FullShard, ShardingStrategy::ShardGradOp,
                                                    ShardingStrategy::NoShard, ShardingStrategy::HybridShard,
                                                    ShardingStrategy::HybridShardZero2};
  return all;
}

bool reshards_after_forward(ShardingStrategy strategy) {
  return strategy == ShardingStrategy::FullShard || strategy == ShardingStrategy::HybridShard;
}

std::optional<int64_t> unit_position(int64_t index, int64_t units) {
  const int64_t i = index < 0 ? units + index : index;
  if (i < 0 || i >= units) return std::nullopt;
  return i;
}

std::string to_string(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::FullShard: return "full_shard";
    case ShardingStrategy::ShardGradOp: return "shard_grad_op";
    case ShardingStrategy::NoShard: return "no_shard";
    case ShardingStrategy::HybridShard: return "hybrid_shard";
    case ShardingStrategy::HybridShardZero2: return "hybrid_shard_zero2";
  }
  return "?";
}

ShardingStrategy parse_strategy(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (auto s : all_strategies())
    if (to_string(s) == lower) return s;
  throw std::invalid_argument("unknown sharding strategy '" + name +
                              "': expected one of full_shard, shard_grad_op, no_shard, hybrid_shard, "
                              "hybrid_shard_zero2");
}

ShardLayout ShardLayout::of(const std::vector<int64_t>& shape, int group_size) {
  if (group_size < 1) throw std::invalid_argument("shard group size must be >= 1");
  ShardLayout l;
  l.group_size = group_size;
  l.dim0 = shape.empty() ? 1 : shape[0];
  l.row_numel = 1;
  for (size_t i = 1; i < shape.size(); ++i) l.row_numel *= shape[i];
  l.shard_rows = (l.dim0 + group_size - 1) / group_size;
  return l;
}

int64_t ShardLayout::valid_rows(int rank) const {
  int64_t begin = std::min(dim0, first_row(rank));
  int64_t end = std::min(dim0, begin + shard_rows);
  return end - begin;
}

int default_hybrid_shard_size(int world) {
  for (int s = world / 2; s >= 1; --s)
    if (world % s == 0) return s;
  return 1;
}

int shard_group_size(ShardingStrategy strategy, int world_size, int hybrid_shard_size) {
  switch (strategy) {
    case ShardingStrategy::FullShard:
    case ShardingStrategy::ShardGradOp: return world_size;
    case ShardingStrategy::NoShard: return 1;
    case ShardingStrategy::HybridShard:
    case ShardingStrategy::HybridShardZero2:
      return hybrid_shard_size > 0 ? hybrid_shard_size : default_hybrid_shard_size(world_size);
  }
  return world_size;
}

std::string post_forward_group_size_problem(int group_size, int shard_size) {
  if (group_size > 1 && group_size < shard_size && shard_size % group_size == 0) return "";
  return "must divide the shard group size " + std::to_string(shard_size) + " and lie strictly between 1 and it";
}

}  // namespace fsdpp::fsdp
