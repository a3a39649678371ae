#include "core/fsdp/grad_reducer.h"

#include <ATen/ATen.h>

#include <optional>
#include <stdexcept>

#include "core/fsdp/fsdp_unit.h"

namespace fsdpp::fsdp {

using comm::ReduceOp;

namespace {

// How the ranks' gradients combine: their average (FSDP2's ReduceOp.AVG), or with a divide
// factor (FSDP2's set_gradient_divide_factor) their sum, divided by the factor once every
// stage has summed.
struct Combine {
  std::optional<double> divide_factor;

  ReduceOp op() const { return divide_factor ? ReduceOp::Sum : ReduceOp::Avg; }
  void finish(at::Tensor& reduced) const {
    if (divide_factor) reduced.div_(*divide_factor);
  }
};

// FULL_SHARD, SHARD_GRAD_OP: reduce-scatter over the shard group.
class ShardAverage : public GradReducer {
 public:
  ShardAverage(std::shared_ptr<comm::Communicator> shard, int64_t shard_total, Combine combine)
      : shard_(std::move(shard)), shard_total_(shard_total), combine_(combine) {}

  PendingReduction issue(const at::Tensor& input) override {
    PendingReduction pending;
    if (shard_->size() == 1) {
      // A group of one: the average (and the sum) is this rank's own gradients, bit for
      // bit. No collective (FSDP2's foreach_reduce skips it too at world size 1, and
      // copies); the packed input is the output.
      pending.output = input;
      return pending;
    }
    pending.output = at::empty({shard_total_}, input.options());
    pending.work = shard_->reduce_scatter_async(pending.output, input, combine_.op());
    return pending;
  }

  std::vector<at::Tensor> wait(PendingReduction& pending) override {
    auto reduced = reduce_within_shard_group(pending);
    combine_.finish(reduced);
    return {reduced};
  }

 protected:
  at::Tensor reduce_within_shard_group(PendingReduction& pending) {
    pending.work.wait();
    return pending.output;
  }

  std::shared_ptr<comm::Communicator> shard_;
  int64_t shard_total_;
  Combine combine_;
};

// Hybrid strategies: the shard group's average, averaged again across the replicas.
class HybridAverage final : public ShardAverage {
 public:
  HybridAverage(std::shared_ptr<comm::Communicator> shard, std::shared_ptr<comm::Communicator> replicate,
                int64_t shard_total, Combine combine)
      : ShardAverage(std::move(shard), shard_total, combine), replicate_(std::move(replicate)) {}

  std::vector<at::Tensor> wait(PendingReduction& pending) override {
    auto reduced = reduce_within_shard_group(pending);
    replicate_->all_reduce(reduced, combine_.op());
    combine_.finish(reduced);
    return {reduced};
  }

 private:
  std::shared_ptr<comm::Communicator> replicate_;
};

// NO_SHARD with the module's tensors as parameters: one flat all-reduce, in place.
class ReplicaAverage final : public GradReducer {
 public:
  ReplicaAverage(std::shared_ptr<comm::Communicator> replicate, Combine combine)
      : replicate_(std::move(replicate)), combine_(combine) {}

  PendingReduction issue(const at::Tensor& input) override {
    if (replicate_->size() == 1) return {{}, input};  // one replica: only the divide factor applies
    return {replicate_->all_reduce_async(input, combine_.op()), input};
  }

  std::vector<at::Tensor> wait(PendingReduction& pending) override {
    pending.work.wait();
    combine_.finish(pending.output);
    return {pending.output};
  }

 private:
  std::shared_ptr<comm::Communicator> replicate_;
  Combine combine_;
};

// ReductionOrder::WorldSizeInvariant: world rank j gets every rank's slice of shard j % S,
// unsummed. The pieces, in shard order, repeat once per replica (the hybrid mesh is
// row-major; NO_SHARD: S = 1). An input of k micro-steps' buffers back to back travels in
// the same one all-to-all: each destination gets, from each rank, its slice of every
// micro-step.
class WorldOrdered final : public GradReducer {
 public:
  WorldOrdered(std::shared_ptr<comm::Communicator> world, int shard_group_size, int64_t shard_total)
      : world_(std::move(world)), shard_group_size_(shard_group_size), shard_total_(shard_total) {}

  PendingReduction issue(const at::Tensor& input) override {
    const int64_t n = world_->size(), s = shard_group_size_;
    const int64_t k = input.numel() / (s * shard_total_);  // micro-steps
    // [s, k, T]: destination shard first, each micro-step's slice in order.
    at::Tensor send = k == 1 ? input.view({s, 1, shard_total_}) : input.view({k, s, shard_total_}).transpose(0, 1);
    if (n != s) send = send.repeat({n / s, 1, 1});
    PendingReduction pending;
    pending.output = at::empty({n * k * shard_total_}, input.options());
    pending.work = world_->all_to_all_single_async(pending.output.view({n, k * shard_total_}),
                                                   send.reshape({n, k * shard_total_}));
    return pending;
  }

  // Micro-step by micro-step, each rank's slice in rank order: chunk c = micro * n + rank.
  std::vector<at::Tensor> wait(PendingReduction& pending) override {
    pending.work.wait();
    const int64_t n = world_->size(), k = pending.output.numel() / (n * shard_total_);
    const at::Tensor by_rank = pending.output.view({n, k, shard_total_});
    std::vector<at::Tensor> slices;
    slices.reserve(static_cast<size_t>(n * k));
    for (int64_t m = 0; m < k; ++m)
      for (int64_t r = 0; r < n; ++r) slices.push_back(by_rank[r][m]);
    return slices;
  }

  bool folds_from_zero() const override { return true; }

 private:
  std::shared_ptr<comm::Communicator> world_;
  int shard_group_size_;
  int64_t shard_total_;
};

}  // namespace

std::unique_ptr<GradReducer> make_grad_reducer(const UnitComms& comms, bool replicated, int64_t shard_total) {
  if (!comms.shard || !comms.replicate)
    throw std::logic_error("make_grad_reducer: a unit needs its shard and replicate groups");
  if (comms.world) return std::make_unique<WorldOrdered>(comms.world, comms.shard->size(), shard_total);
  const Combine combine{comms.divide_factor};
  if (replicated) {
    const bool reduces = comms.replicate->size() > 1 || combine.divide_factor;
    return reduces ? std::make_unique<ReplicaAverage>(comms.replicate, combine) : nullptr;
  }
  if (comms.replicate->size() > 1)
    return std::make_unique<HybridAverage>(comms.shard, comms.replicate, shard_total, combine);
  return std::make_unique<ShardAverage>(comms.shard, shard_total, combine);
}

}  // namespace fsdpp::fsdp
