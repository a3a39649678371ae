// README.md's library example, verbatim below this comment (ctest's examples.library checks
// that it is): FULL_SHARD training of fsdpp's tiny transformer through fsdpp::core,
// one process per rank, the world read from torchrun's or SLURM's environment (or RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
#include "core/comm/communicator.h"
#include "core/comm/rendezvous.h"
#include "core/fsdp/sharded_model.h"
#include "core/models/tiny_transformer.h"
#include "core/nn/module_hooks.h"
using namespace fsdpp;

int main() {
  auto world = comm::Communicator::connect(comm::resolve_world(comm::process_env()));
  torch::manual_seed(0);  // the same initial weights on every rank: create() shards them
  models::TinyTransformer model(models::TinyTransformerConfig{});
  auto sharded = fsdp::ShardedModel::create(model.ptr(), *world, fsdp::FsdpOptions{},
                                            fsdp::wrap_by_module_type({"fsdpp::models::TinyBlockImpl"}));
  torch::optim::AdamW opt(sharded->parameters(), torch::optim::AdamWOptions(1e-3));  // this rank's shards

  torch::manual_seed(1 + world->rank());  // each rank its own batches
  for (int step = 0; step < 10; ++step) {
    auto tokens = torch::randint(0, 61, {4, 9}, torch::kLong);
    auto loss = models::lm_loss(nn::call(model, tokens.slice(1, 0, 8)), tokens.slice(1, 1, 9));
    loss.backward();               // each unit's gradients are reduce-scattered as its backward ends
    sharded->clip_grad_norm(1.0);  // the global norm over the shards
    opt.step();
    opt.zero_grad();
  }
  world->shutdown();
}
