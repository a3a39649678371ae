#include "core/fsdp/fsdp_unit.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace fsdpp::fsdp {

using comm::ReduceOp;

FsdpUnit::FsdpUnit(std::string name, std::vector<std::pair<std::string, at::Tensor>> params, UnitComms comms,
                   bool reshard_after_forward, const UnitPrecision& precision)
    : name_(std::move(name)),
      comms_(std::move(comms)),
      precision_(precision),
      reshard_after_forward_(reshard_after_forward) {
  int group = comms_.shard ? comms_.shard->size() : 1;
  int rank = comms_.shard ? comms_.shard->rank() : 0;
  if (!params.empty()) {
    master_dtype_ = params.front().second.scalar_type();
    device_ = params.front().second.is_meta() ? precision_.meta_device : params.front().second.device();
  }
  // A separate master copy is needed when the compute dtype differs or the shards live
  // elsewhere; then even a group of one goes through the flat-buffer path (its
  // "all-gather" is a local copy and NO_SHARD's all-reduce is the replica step). The
  // world-size-invariant order takes that path too, so that every world size and
  // strategy runs the same fold on the same kind of buffers: autograd's own
  // accumulation into a replicated parameter's .grad would add a rank's micro-steps
  // before the other ranks' slices.
  const bool needs_master = precision_.offload || param_dtype() != master_dtype_ || comms_.world != nullptr;
  replicated_ = group == 1 && !needs_master;
  for (auto& [pname, tensor] : params) params_.emplace_back(pname, tensor, group, rank, replicated_);
  for (const auto& p : params_) full_param_bytes_ += p.full_numel() * static_cast<int64_t>(c10::elementSize(param_dtype()));
  if (replicated_) {
    for (auto& p : params_) p.materialize_in_place(precision_.materialize, device_);
    state_ = State::Unsharded;  // the module's parameters are the only copy
    return;
  }
  for (const auto& p : params_) {
    if (p.unsharded().scalar_type() != master_dtype_)
      throw std::invalid_argument("fully_shard: unit '" + name_ + "' mixes parameter dtypes");
    shard_total_ += p.layout().shard_numel();
  }
  if (params_.empty()) return;
  auto master = params_.front().unsharded().options().device(device_).requires_grad(false);
  if (precision_.offload) master = master.device(at::kCPU).pinned_memory(device_.is_cuda());
  flat_shard_ = at::zeros({shard_total_}, master);
  int64_t offset = 0;
  for (auto& p : params_) {
    p.bind_shard(flat_shard_.narrow(0, offset, p.layout().shard_numel()), offset, param_dtype(), device_,
                 precision_.materialize);
    offset += p.layout().shard_numel();
  }
  state_ = State::Sharded;
}

namespace {

const char* to_string(FsdpUnit::State state) { return state == FsdpUnit::State::Sharded ? "SHARDED" : "UNSHARDED"; }

const char* to_string(FsdpUnit::TrainingState state) {
  switch (state) {
    case FsdpUnit::TrainingState::Idle: return "IDLE";
    case FsdpUnit::TrainingState::Forward: return "FORWARD";
    case FsdpUnit::TrainingState::PreBackward: return "PRE_BACKWARD";
    case FsdpUnit::TrainingState::PostBackward: return "POST_BACKWARD";
  }
  return "?";
}

}  // namespace

std::string FsdpUnit::describe_state() const {
  std::string out = std::string(to_string(state_)) + ", " + to_string(training_state_);
  if (gather_work_) out += ", all-gather in flight";
  if (!reduce_work_.empty()) out += ", reduce-scatter in flight";
  return out;
}

void FsdpUnit::protocol_error(const std::string& call, const std::string& why) const {
  throw std::logic_error("FSDP unit '" + name_ + "': " + call + " in state " + describe_state() + ": " + why);
}

bool FsdpUnit::enter_pre_backward() {
  if (training_state_ == TrainingState::Idle)
    protocol_error("pre-backward", "backward before forward (the unit ran no forward this iteration)");
  if (training_state_ != TrainingState::Forward) return false;
  training_state_ = TrainingState::PreBackward;
  return true;
}

bool FsdpUnit::enter_post_backward() {
  if (training_state_ == TrainingState::Idle)
    protocol_error("post-backward", "backward before forward (the unit ran no forward this iteration)");
  if (training_state_ == TrainingState::PostBackward) return false;
  training_state_ = TrainingState::PostBackward;
  return true;
}

at::ScalarType FsdpUnit::param_dtype() const { return precision_.param_dtype.value_or(master_dtype_); }
at::ScalarType FsdpUnit::reduce_dtype() const { return precision_.reduce_dtype.value_or(param_dtype()); }

void FsdpUnit::unshard_async() {
  if (replicated_ || params_.empty() || state_ == State::Unsharded || gather_work_) return;
  auto& shard = *comms_.shard;
  // Offload: copy the shard to the compute device (host to host on CPU builds);
  // mixed precision: cast it to param_dtype, so the all-gather moves param_dtype bytes.
  at::Tensor input = flat_shard_;
  if (precision_.offload || param_dtype() != master_dtype_)
    input = flat_shard_.to(device_, param_dtype(), /*non_blocking=*/true, /*copy=*/true);
  at::Tensor output = at::empty({shard_total_ * shard.size()}, input.options());
  for (auto& p : params_) p.alloc_unsharded();
  gather_work_ = PendingGather{shard.all_gather_into_async(output, input), output};
}

void FsdpUnit::wait_unshard() {
  if (replicated_ || params_.empty() || state_ == State::Unsharded) return;
  if (!gather_work_) unshard_async();
  gather_work_->work.wait();
  at::Tensor output = gather_work_->output;
  gather_work_.reset();
  // variable_data(): writes that autograd does not see (no version bump), since the
  // same tensors may be saved for backward and are refilled before it (FULL_SHARD).
  for (auto& p : params_) p.copy_out(output, shard_total_, p.unsharded().variable_data());
  state_ = State::Unsharded;
}

void FsdpUnit::reshard() {
  if (replicated_ || state_ == State::Sharded) return;
  for (auto& p : params_) p.free_unsharded();
  state_ = State::Sharded;
}

void FsdpUnit::discard_unshard() {
  if (!gather_work_) return;
  gather_work_->work.wait();
  gather_work_.reset();
  for (auto& p : params_) p.free_unsharded();
  state_ = State::Sharded;
}

void FsdpUnit::reduce_gradients_async(bool sync) {
  if (training_state_ != TrainingState::PostBackward)
    protocol_error("reduce_gradients_async", "gradients are reduced in post-backward, after the unit's backward");
  if (comms_.world && !sync)
    throw std::logic_error("fully_shard: unit '" + name_ +
                           "': gradient accumulation without sync (no_sync) is not allowed in the world-size-invariant "
                           "reduction order: it would sum a rank's micro-steps before the other ranks' gradients");
  if (!replicated_) {
    // This backward's unsharded gradients join the accumulator (in reduce_dtype), so
    // that no-sync micro-steps add up at that precision; the first one is taken as is.
    grad_accumulators_.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& g = params_[i].unsharded().mutable_grad();
      if (!g.defined()) continue;
      auto& acc = grad_accumulators_[i];
      if (!acc.defined())
        acc = g.scalar_type() == reduce_dtype() ? g : g.to(reduce_dtype());
      else
        acc.add_(g);
      g = at::Tensor();
    }
  }
  if (!sync) return;
  std::vector<bool> has_grad;
  bool any = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    has_grad.push_back(replicated_ ? params_[i].unsharded().grad().defined() : grad_accumulators_[i].defined());
    any = any || has_grad.back();
  }
  // A unit no parameter of which got a gradient (on every rank alike, as with FSDP2)
  // has nothing to reduce.
  if (!any) return;
  PendingReduce pending;
  pending.has_grad = has_grad;
  if (replicated_) {
    // NO_SHARD: one flat all-reduce (average) over the replicas, padded to a multiple of
    // the group so that every rank owns an equal chunk.
    auto& rep = *comms_.replicate;
    if (rep.size() == 1) return;  // one replica: the local gradients are the result
    int64_t total = 0;
    for (auto& p : params_) total += p.full_numel();
    int64_t padded = (total + rep.size() - 1) / rep.size() * rep.size();
    at::Tensor flat = at::zeros({padded}, params_.front().unsharded().options().requires_grad(false));
    int64_t offset = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      if (has_grad[i]) flat.narrow(0, offset, p.full_numel()).copy_(p.unsharded().grad().reshape({-1}));
      offset += p.full_numel();
    }
    pending.output = flat;
    pending.work = rep.all_reduce_async(flat, ReduceOp::Avg);
  } else {
    auto& shard = *comms_.shard;
    auto options = at::TensorOptions().device(device_).dtype(reduce_dtype());
    at::Tensor input = at::zeros({shard_total_ * shard.size()}, options);
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!has_grad[i]) continue;
      params_[i].copy_in_grad(grad_accumulators_[i], input, shard_total_);
      grad_accumulators_[i] = at::Tensor();
    }
    if (comms_.world) {
      // World-size invariant: world rank j gets every rank's slice of shard j % S,
      // unsummed (finish_gradients folds them in rank order). The pieces, in shard order,
      // repeat once per replica (the hybrid mesh is row-major; NO_SHARD: S = 1).
      const int64_t n = comms_.world->size(), s = shard.size();
      at::Tensor send = input.view({s, shard_total_});
      if (n != s) send = send.repeat({n / s, 1});
      pending.output = at::empty({n * shard_total_}, options);
      pending.work = comms_.world->all_to_all_single_async(pending.output.view({n, shard_total_}), send);
      pending.world_slices = true;
    } else {
      pending.output = at::empty({shard_total_}, options);
      pending.work = shard.reduce_scatter_async(pending.output, input, ReduceOp::Avg);
      pending.needs_replicate = comms_.replicate && comms_.replicate->size() > 1;
    }
  }
  reduce_work_.push_back(std::move(pending));
}

void FsdpUnit::finish_gradients() {
  for (auto& pending : reduce_work_) {
    pending.work.wait();
    // Hybrid sharding: the shard group's average, averaged again across replicas.
    if (pending.needs_replicate) comms_.replicate->all_reduce(pending.output, ReduceOp::Avg);
    int64_t offset = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      int64_t span = replicated_ ? p.full_numel() : p.layout().shard_numel();
      if (pending.has_grad[i]) {
        at::Tensor reduced = pending.output.narrow(0, offset, span);
        if (replicated_) {
          p.unsharded().mutable_grad() = reduced.view(p.shape()).clone();
        } else {
          std::vector<int64_t> padded_shape = p.shape();
          if (padded_shape.empty()) padded_shape.push_back(1);
          padded_shape[0] = p.layout().shard_rows;
          reduced = reduced.view(padded_shape).narrow(0, 0, p.sharded().size(0));
          // Into the master dtype and place (host memory with offload).
          auto& grad = p.sharded().mutable_grad();
          if (pending.world_slices) {
            // grad = ((grad + slice_0) + slice_1) + ..., from zeros when undefined, so that
            // a first step, a step after zero_grad and a resumed step fold alike.
            if (!grad.defined()) grad = at::zeros(p.sharded().sizes(), flat_shard_.options());
            const int n = comms_.world->size();
            for (int r = 0; r < n; ++r) {
              at::Tensor slice = pending.output.narrow(0, r * shard_total_ + offset, span)
                                     .view(padded_shape)
                                     .narrow(0, 0, p.sharded().size(0));
              grad.add_(slice.to(grad.device(), grad.scalar_type()));
            }
          } else if (grad.defined()) {
            grad.add_(reduced.to(grad.device()));
          } else {
            grad = reduced.to(flat_shard_.options(), /*non_blocking=*/false, /*copy=*/true);
          }
        }
      }
      offset += span;
    }
  }
  reduce_work_.clear();
}

std::vector<at::Tensor> FsdpUnit::gather_full(bool gradients) {
  if (gradients && !reduce_work_.empty())
    protocol_error("gather_full(gradients)", "the sharded gradients are written by finish_gradients(), not yet called");
  std::vector<at::Tensor> out;
  if (params_.empty()) return out;
  if (replicated_) {
    for (auto& p : params_) {
      if (gradients)
        out.push_back(p.unsharded().grad().defined() ? p.unsharded().grad().detach().clone() : at::Tensor());
      else
        out.push_back(p.unsharded().detach().clone());
    }
    return out;
  }
  auto& shard = *comms_.shard;
  at::Tensor input = flat_shard_;
  std::vector<bool> defined;
  if (gradients) {
    input = at::zeros({shard_total_}, flat_shard_.options());
    for (auto& p : params_) {
      auto& g = p.sharded().grad();
      defined.push_back(g.defined());
      if (g.defined() && g.numel() > 0)
        input.narrow(0, p.offset(), g.numel()).copy_(g.reshape({-1}));
    }
  }
  input = input.to(device_);
  at::Tensor gathered = at::empty({shard_total_ * shard.size()}, input.options());
  shard.all_gather_into(gathered, input);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    // A gradient is undefined everywhere if it is undefined here (same params got grads).
    if (gradients && !defined[i]) {
      out.push_back(at::Tensor());
      continue;
    }
    at::Tensor full = at::empty(p.shape(), flat_shard_.options());
    p.copy_out(gathered, shard_total_, full);
    out.push_back(full);
  }
  return out;
}

UnitMemory FsdpUnit::memory() const {
  UnitMemory m;
  for (const auto& p : params_) {
    const auto es = static_cast<int64_t>(c10::elementSize(master_dtype_));
    m.full_param_bytes += p.full_numel() * static_cast<int64_t>(c10::elementSize(param_dtype()));
    if (replicated_) {
      m.shard_bytes += p.full_numel() * es;
      if (p.unsharded().grad().defined()) m.sharded_grad_bytes += p.full_numel() * es;
    } else {
      m.shard_bytes += p.layout().shard_numel() * es;
      m.padding_bytes += (p.layout().shard_rows - p.layout().valid_rows(comms_.shard->rank())) *
                         p.layout().row_numel * es;
      if (p.sharded().grad().defined()) m.sharded_grad_bytes += p.sharded().grad().numel() * es;
    }
  }
  return m;
}

}  // namespace fsdpp::fsdp
