#include "core/fsdp/fsdp_unit.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace fsdpp::fsdp {

using comm::ReduceOp;

FsdpUnit::FsdpUnit(std::string name, std::vector<std::pair<std::string, at::Tensor>> params, UnitComms comms,
                   bool reshard_after_forward)
    : name_(std::move(name)), comms_(std::move(comms)), reshard_after_forward_(reshard_after_forward) {
  int group = comms_.shard ? comms_.shard->size() : 1;
  int rank = comms_.shard ? comms_.shard->rank() : 0;
  replicated_ = group == 1;
  for (auto& [pname, tensor] : params) params_.emplace_back(pname, tensor, group, rank);
  for (const auto& p : params_) full_param_bytes_ += p.full_numel() * p.unsharded().element_size();
  if (replicated_) {
    state_ = State::Unsharded;  // the module's parameters are the only copy
    return;
  }
  for (const auto& p : params_) {
    if (p.unsharded().scalar_type() != params_.front().unsharded().scalar_type())
      throw std::invalid_argument("fully_shard: unit '" + name_ + "' mixes parameter dtypes");
    shard_total_ += p.layout().shard_numel();
  }
  if (params_.empty()) return;
  flat_shard_ = at::zeros({shard_total_}, params_.front().unsharded().options().requires_grad(false));
  int64_t offset = 0;
  for (auto& p : params_) {
    p.bind_shard(flat_shard_.narrow(0, offset, p.layout().shard_numel()), offset);
    offset += p.layout().shard_numel();
  }
  state_ = State::Sharded;
}

void FsdpUnit::unshard_async() {
  if (replicated_ || params_.empty() || state_ == State::Unsharded || gather_work_) return;
  auto& shard = *comms_.shard;
  at::Tensor output = at::empty({shard_total_ * shard.size()}, flat_shard_.options());
  for (auto& p : params_) p.alloc_unsharded();
  gather_work_ = PendingGather{shard.all_gather_into_async(output, flat_shard_), output};
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
  if (!sync) return;
  std::vector<bool> has_grad;
  bool any = false;
  for (auto& p : params_) {
    has_grad.push_back(p.unsharded().grad().defined());
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
    at::Tensor input = at::zeros({shard_total_ * shard.size()}, flat_shard_.options());
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      if (!has_grad[i]) continue;
      p.copy_in_grad(p.unsharded().grad(), input, shard_total_);
      p.unsharded().mutable_grad() = at::Tensor();
    }
    pending.output = at::empty({shard_total_}, flat_shard_.options());
    pending.work = shard.reduce_scatter_async(pending.output, input, ReduceOp::Avg);
    pending.needs_replicate = comms_.replicate && comms_.replicate->size() > 1;
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
          auto& grad = p.sharded().mutable_grad();
          if (grad.defined())
            grad.add_(reduced);
          else
            grad = reduced.clone();
        }
      }
      offset += span;
    }
  }
  reduce_work_.clear();
}

std::vector<at::Tensor> FsdpUnit::gather_full(bool gradients) {
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
  at::Tensor gathered = at::empty({shard_total_ * shard.size()}, flat_shard_.options());
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
    int64_t es = p.unsharded().element_size();
    m.full_param_bytes += p.full_numel() * es;
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
