#include "core/comm/device_mesh.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace fsdpp::comm {

HybridMesh make_hybrid_mesh(Communicator& world, int shard_size, const std::string& base_tag) {
  int n = world.size();
  if (shard_size < 1 || n % shard_size != 0)
    throw std::invalid_argument("hybrid mesh: shard group size " + std::to_string(shard_size) +
                                " must divide the world size " + std::to_string(n));
  HybridMesh mesh;
  mesh.shard_size = shard_size;
  mesh.replicas = n / shard_size;
  int row = world.rank() / shard_size, column = world.rank() % shard_size;
  std::vector<int> shard_ranks, replicate_ranks;
  for (int i = 0; i < shard_size; ++i) shard_ranks.push_back(row * shard_size + i);
  for (int g = 0; g < mesh.replicas; ++g) replicate_ranks.push_back(g * shard_size + column);
  // Every rank builds its row group first, then its column group; a constructor only
  // waits for its own members, who follow the same order, so this cannot deadlock.
  std::string tag = base_tag + std::to_string(mesh.replicas) + "x" + std::to_string(shard_size);
  mesh.shard = world.subgroup(shard_ranks, tag + "/shard" + std::to_string(row));
  mesh.replicate = world.subgroup(replicate_ranks, tag + "/replicate" + std::to_string(column));
  return mesh;
}

}  // namespace fsdpp::comm
