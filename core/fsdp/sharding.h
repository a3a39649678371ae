// Sharding strategies and the per-parameter sharding rule.
//
// Rule (dim-0 sharding with padding, as FSDP2's FSDPParam): a parameter with dim0 rows
// (a 0-d tensor counts as 1 row) on a shard group of S ranks is cut into S shards of
// shard_rows = ceil(dim0 / S) rows. Rank r holds rows [r*shard_rows, min(dim0,
// (r+1)*shard_rows)), which is empty for the last ranks when dim0 < S or dim0 is not a
// multiple of shard_rows; every shard is padded with zero rows to shard_rows, so all
// ranks exchange equal pieces.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdpp::fsdp {

enum class ShardingStrategy {
  FullShard,         // ZeRO-3: reshard after forward and after backward
  ShardGradOp,       // ZeRO-2: keep parameters unsharded from forward to backward
  NoShard,           // DDP: replicated parameters, all-reduced gradients
  HybridShard,       // FULL_SHARD inside a shard group, replicated across groups
  HybridShardZero2,  // SHARD_GRAD_OP inside a shard group, replicated across groups
};

// "full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2",
// case-insensitive. Throws std::invalid_argument listing the accepted names.
ShardingStrategy parse_strategy(const std::string& name);
std::string to_string(ShardingStrategy strategy);
const std::vector<ShardingStrategy>& all_strategies();
// Whether the strategy frees a unit's gathered parameters after its forward (FULL_SHARD and
// HYBRID_SHARD; the root never does): the default of a unit's reshard_after_forward.
bool reshards_after_forward(ShardingStrategy strategy);

// Hybrid strategies' shard group size when FsdpOptions::hybrid_shard_size is 0: the
// largest divisor of `world` below it (1 for a world of 1 or a prime).
int default_hybrid_shard_size(int world);

// The ranks `strategy` shards a unit over on `world_size` ranks: all of them, one
// (NO_SHARD), or for the hybrid strategies `hybrid_shard_size` (0: the default above).
int shard_group_size(ShardingStrategy strategy, int world_size, int hybrid_shard_size);

// Why reshard_after_forward = group_size (ZeRO++ hpZ) does not fit a shard group of
// `shard_size` ranks ("must divide the shard group size S and lie strictly between 1 and
// it"), or "" when it does. Callers put the flag or the call in front.
std::string post_forward_group_size_problem(int group_size, int shard_size);

// A unit index as --no-reshard-after-forward gives it: `index` among `units` wrapped units in
// module order, negative from the end (-1: the last). nullopt when past them.
std::optional<int64_t> unit_position(int64_t index, int64_t units);

struct ShardLayout {
  int64_t dim0 = 1;        // rows of the full parameter
  int64_t row_numel = 1;   // elements per row
  int64_t shard_rows = 1;  // ceil(dim0 / group size): every rank's padded shard
  int group_size = 1;

  static ShardLayout of(const std::vector<int64_t>& shape, int group_size);
  int64_t shard_numel() const { return shard_rows * row_numel; }
  // Rows of real data on rank r (0 for ranks holding only padding).
  int64_t valid_rows(int rank) const;
  int64_t first_row(int rank) const { return shard_rows * rank; }
};

}  // namespace fsdpp::fsdp
