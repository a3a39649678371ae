// The 2-D mesh of hybrid sharding (HSDP): the world's ranks laid out as
// [replicas x shard_size], row-major. Parameters are sharded across a row (the shard
// group, consecutive ranks) and replicated down a column (the replicate group), like
// init_device_mesh(..., (world / shard_size, shard_size)) in PyTorch.
#pragma once

#include <memory>

#include "core/comm/communicator.h"

namespace fsdpp::comm {

struct HybridMesh {
  int shard_size = 1;
  int replicas = 1;
  std::shared_ptr<Communicator> shard;      // ranks {g*S, ..., g*S + S-1}, g = rank / S
  std::shared_ptr<Communicator> replicate;  // ranks {i, i+S, i+2S, ...}, i = rank % S
};

// Collective over the world: every rank calls it with the same shard_size, which must
// divide the world size (throws std::invalid_argument otherwise).
// `tag` names the groups; it must be unique per mesh in the world.
HybridMesh make_hybrid_mesh(Communicator& world, int shard_size, const std::string& tag = "mesh");

}  // namespace fsdpp::comm
