#include "core/fsdp/grad_reducer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

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

// ---------------------------------------------------------------- packing and fold

namespace {

using Span = std::pair<int64_t, int64_t>;  // [begin, end) elements of one rank's chunk

// The spans of rank r's chunk [0, shard_total) of the reduce-scatter input that no gradient
// is copied into: the gaps between parameters' shards, every parameter's padding rows,
// parameters without a gradient and the tail; adjacent ones merged, in offset order.
// `by_offset`: the parameters' indices sorted by offset (their shards do not overlap).
std::vector<Span> unwritten_spans(const std::vector<FsdpParam>& params, const std::vector<size_t>& by_offset,
                                  const std::vector<bool>& has_grad, int64_t shard_total, int r) {
  std::vector<Span> spans;
  int64_t cursor = 0;  // end of the last written rows
  for (size_t i : by_offset) {
    const auto& layout = params[i].layout();
    const int64_t written = has_grad[i] ? layout.valid_rows(r) * layout.row_numel : 0;
    if (written == 0) continue;
    if (params[i].offset() > cursor) spans.emplace_back(cursor, params[i].offset());
    cursor = params[i].offset() + written;
  }
  if (cursor < shard_total) spans.emplace_back(cursor, shard_total);
  return spans;
}

// Zeroes what copy_in_grad does not write, so that the buffer is the zero-padded layout
// without a full zero-fill first (most of it is overwritten at once): one fill per span,
// and where every rank's chunk has the same spans (no uneven padding), one strided fill
// per span across all ranks.
void zero_unwritten(const std::vector<FsdpParam>& params, const std::vector<bool>& has_grad, int64_t shard_total,
                    int group_size, at::Tensor& input) {
  std::vector<size_t> by_offset(params.size());
  for (size_t i = 0; i < params.size(); ++i) by_offset[i] = i;
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [&](size_t a, size_t b) { return params[a].offset() < params[b].offset(); });
  int64_t end = 0;
  for (size_t i : by_offset) {
    const auto& p = params[i];
    if (p.layout().shard_numel() == 0) continue;  // holds no element, overlaps nothing
    if (p.offset() < end || p.offset() + p.layout().shard_numel() > shard_total)
      throw std::logic_error("reduce_scatter_input: parameter '" + p.name() + "' at offset " +
                             std::to_string(p.offset()) + " (" + std::to_string(p.layout().shard_numel()) +
                             " elements) overlaps another's shard or lies past the shard total " +
                             std::to_string(shard_total));
    end = p.offset() + p.layout().shard_numel();
  }
  std::vector<std::vector<Span>> spans;
  spans.reserve(group_size);
  for (int r = 0; r < group_size; ++r) spans.push_back(unwritten_spans(params, by_offset, has_grad, shard_total, r));
  if (std::all_of(spans.begin(), spans.end(), [&](const auto& s) { return s == spans.front(); })) {
    const at::Tensor chunks = input.view({group_size, shard_total});
    for (const auto& [begin, stop] : spans.front()) chunks.narrow(1, begin, stop - begin).zero_();
    return;
  }
  for (int r = 0; r < group_size; ++r)
    for (const auto& [begin, stop] : spans[r]) input.narrow(0, r * shard_total + begin, stop - begin).zero_();
}

}  // namespace

at::Tensor reduce_scatter_input(const std::vector<FsdpParam>& params, std::vector<at::Tensor>& accumulated,
                                const std::vector<bool>& has_grad, int64_t shard_total, int group_size,
                                const at::TensorOptions& options) {
  at::Tensor input = at::empty({shard_total * group_size}, options);
  zero_unwritten(params, has_grad, shard_total, group_size, input);
  // copy_in_grad's copy_ casts a gradient still in the compute dtype (one reduced in the
  // backward that produced it) to the reduce dtype while it packs.
  for (size_t i = 0; i < params.size(); ++i) {
    if (!has_grad[i]) continue;
    params[i].copy_in_grad(accumulated[i], input, shard_total);
    accumulated[i] = at::Tensor();
  }
  return input;
}

at::Tensor replica_reduce_input(const std::vector<FsdpParam>& params, const std::vector<bool>& has_grad, int replicas) {
  int64_t total = 0;
  for (const auto& p : params) total += p.full_numel();
  const int64_t padded = (total + replicas - 1) / replicas * replicas;
  at::Tensor input = at::zeros({padded}, params.front().unsharded().options().requires_grad(false));
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (has_grad[i]) input.narrow(0, offset, p.full_numel()).copy_(p.unsharded().grad().reshape({-1}));
    offset += p.full_numel();
  }
  return input;
}

void fold_reduced_gradients(std::vector<FsdpParam>& params, const std::vector<bool>& has_grad,
                            const std::vector<at::Tensor>& reduced, bool replicated, bool from_zero,
                            const at::TensorOptions& master) {
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    const int64_t span = replicated ? p.full_numel() : p.layout().shard_numel();
    if (has_grad[i]) {
      if (replicated) {
        p.unsharded().mutable_grad() = reduced.front().narrow(0, offset, span).view(p.shape()).clone();
      } else {
        std::vector<int64_t> padded_shape = p.shape();
        if (padded_shape.empty()) padded_shape.push_back(1);
        padded_shape[0] = p.layout().shard_rows;
        // This parameter's rows of a reduced shard buffer, padding dropped.
        auto rows_in = [&](const at::Tensor& buffer) {
          return buffer.narrow(0, offset, span).view(padded_shape).narrow(0, 0, p.sharded().size(0));
        };
        auto& grad = p.sharded().mutable_grad();
        if (!grad.defined() && from_zero) grad = at::zeros(p.sharded().sizes(), master);
        for (const auto& buffer : reduced) {
          if (grad.defined()) {
            grad.add_(rows_in(buffer).to(grad.device(), grad.scalar_type()));
          } else {
            // A lone buffer is the gradient: its copy may stay in flight (to pinned host
            // memory when offloaded, as FSDP2's non-blocking D2H of each reduced
            // gradient). Another buffer to add reads it on the host at once: blocking.
            grad = rows_in(buffer).to(master, /*non_blocking=*/reduced.size() == 1, /*copy=*/true);
          }
        }
      }
    }
    offset += span;
  }
}

// ---------------------------------------------------------------- a unit's gradients

namespace {

// Whether casting a gradient in per-rank pieces (copy_in_grad's copies into the packed
// reduce-scatter input) gives the bits of one cast of the whole tensor, for every value.
// bf16 -> fp32 is a 16-bit shift in every kernel (CPU scalar and vectorized, CUDA), NaN
// payloads included. fp16 -> fp32 is not: LibTorch's CPU kernel keeps a NaN's sign and
// payload in its vectorized body but returns 0x7fffffff in its scalar tail, so pieces
// would change the NaN bits of an overflowed fp16 step (ShardedGradScaler's bitwise test
// compares them).
bool casts_alike_in_pieces(at::ScalarType from, at::ScalarType to) { return from == at::kBFloat16 && to == at::kFloat; }

}  // namespace

UnitGradients::UnitGradients(std::vector<FsdpParam>& params, const UnitComms& comms, bool replicated,
                             int64_t shard_total, at::Device device, at::ScalarType reduce_dtype)
    : params_(params),
      comms_(comms),
      replicated_(replicated),
      shard_total_(shard_total),
      device_(device),
      reduce_dtype_(reduce_dtype),
      reducer_(make_grad_reducer(comms, replicated, shard_total)) {}

void UnitGradients::issue(bool sync) {
  // World-size-invariant order: every micro-step is packed alone (as if synced), and sent
  // with the sync one (unsent_inputs_).
  const bool pack = sync || comms_.world != nullptr;
  if (!replicated_) {
    // This backward's unsharded gradients join the accumulator (in reduce_dtype), so
    // that no-sync micro-steps add up at that precision; the first one is taken as is.
    // A first bf16 gradient reduced in this same call stays bf16: packing it
    // (copy_in_grad's copy_) casts it to fp32 on the way, the same bits in one pass over
    // the bytes instead of a cast and a copy. One kept across no-sync micro-steps is cast
    // now, so that they add up in reduce_dtype (fp16 sums overflow).
    const bool packed_now = pack && reducer_ != nullptr;
    accumulators_.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& g = params_[i].unsharded().mutable_grad();
      if (!g.defined()) continue;
      auto& acc = accumulators_[i];
      if (acc.defined()) {
        acc.add_(g);
      } else {
        const bool cast_when_packed = packed_now && casts_alike_in_pieces(g.scalar_type(), reduce_dtype_);
        acc = g.scalar_type() == reduce_dtype_ || cast_when_packed ? g : g.to(reduce_dtype_);
      }
      g = at::Tensor();
    }
  }
  if (!pack) return;
  std::vector<bool> has_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    has_grad.push_back(replicated_ ? params_[i].unsharded().grad().defined() : accumulators_[i].defined());
  // This rank packs its own gradients (zeros where it has none); every rank folds the
  // reduction into the parameters that got a gradient on any rank.
  std::vector<bool> reduced = reducer_ && comms_.agree_on_gradients ? on_any_rank(has_grad) : has_grad;
  // A unit no parameter of which got a gradient (on every rank alike, as with FSDP2)
  // has nothing to reduce; one replica's local gradients are the result. Micro-steps kept
  // unsent are sent all the same.
  const bool nothing = !reducer_ || std::find(reduced.begin(), reduced.end(), true) == reduced.end();
  if (nothing && (!sync || unsent_inputs_.empty())) return;
  at::Tensor input;
  if (!nothing)
    input = replicated_ ? replica_reduce_input(params_, has_grad, comms_.replicate->size())
                        : reduce_scatter_input(params_, accumulators_, has_grad, shard_total_, comms_.shard->size(),
                                               at::TensorOptions().device(device_).dtype(reduce_dtype_));
  if (comms_.world != nullptr && (!sync || !unsent_inputs_.empty())) {
    // A parameter reduced in some micro-steps only gets zero slices from the others: adding
    // +0 to a fold that starts from +0 changes no bit. A micro-step with nothing to reduce
    // is left out, as the synced one skips it.
    if (!nothing) {
      unsent_reduced_.resize(reduced.size(), false);
      for (size_t i = 0; i < reduced.size(); ++i) unsent_reduced_[i] = unsent_reduced_[i] || reduced[i];
      unsent_inputs_.push_back(std::move(input));
    }
    if (!sync) return;
    input = at::cat(unsent_inputs_);
    reduced = std::move(unsent_reduced_);
    unsent_inputs_.clear();
    unsent_reduced_.clear();
  }
  pending_.push_back(Pending{reducer_->issue(input), std::move(reduced)});
}

std::vector<bool> UnitGradients::on_any_rank(const std::vector<bool>& has_grad) const {
  auto flags = at::zeros({static_cast<int64_t>(has_grad.size())}, at::TensorOptions().dtype(at::kFloat));
  for (size_t i = 0; i < has_grad.size(); ++i)
    if (has_grad[i]) flags[static_cast<int64_t>(i)] = 1.0f;
  flags = flags.to(device_);  // NCCL reduces device tensors
  for (const auto& group : {comms_.shard, comms_.replicate})
    if (group && group->size() > 1) group->all_reduce(flags, comm::ReduceOp::Max);
  const auto on_host = flags.to(at::kCPU);
  std::vector<bool> any(has_grad.size());
  for (size_t i = 0; i < any.size(); ++i) any[i] = on_host[static_cast<int64_t>(i)].item<float>() > 0;
  return any;
}

void UnitGradients::finish(const at::TensorOptions& master) {
  for (auto& pending : pending_)
    fold_reduced_gradients(params_, pending.has_grad, reducer_->wait(pending.reduction), replicated_,
                           reducer_->folds_from_zero(), master);
  pending_.clear();
}

}  // namespace fsdpp::fsdp
