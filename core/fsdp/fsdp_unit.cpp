#include "core/fsdp/fsdp_unit.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "core/fsdp/fsdp_collectives.h"
#include "core/fsdp/grad_reducer.h"

namespace fsdpp::fsdp {

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
  for (const auto& p : params_)
    full_param_bytes_ += p.full_numel() * static_cast<int64_t>(c10::elementSize(param_dtype()));
  if (replicated_) {
    for (auto& p : params_) p.materialize_in_place(precision_.materialize, device_);
    state_ = State::Unsharded;  // the module's parameters are the only copy
    gradients_ = std::make_unique<UnitGradients>(params_, comms_, replicated_, shard_total_, device_, reduce_dtype());
    return;
  }
  for (const auto& p : params_) {
    if (p.unsharded().scalar_type() != master_dtype_)
      throw std::invalid_argument("fully_shard: unit '" + name_ + "' mixes parameter dtypes");
    shard_total_ += p.layout().shard_numel();
  }
  gradients_ = std::make_unique<UnitGradients>(params_, comms_, replicated_, shard_total_, device_, reduce_dtype());
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

const char* to_string(FsdpUnit::State state) {
  switch (state) {
    case FsdpUnit::State::Sharded: return "SHARDED";
    case FsdpUnit::State::ShardedPostForward: return "SHARDED_POST_FORWARD";
    case FsdpUnit::State::Unsharded: return "UNSHARDED";
  }
  return "?";
}

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
  if (gradients_->in_flight()) out += ", reduce-scatter in flight";
  return out;
}

void FsdpUnit::protocol_error(const std::string& call, const std::string& why) const {
  throw std::logic_error("FSDP unit '" + name_ + "': " + call + " in state " + describe_state() + ": " + why);
}

bool FsdpUnit::enter_pre_backward() {
  if (training_state_ == TrainingState::Idle)
    protocol_error("pre-backward", "backward before forward (the unit ran no forward this iteration)");
  if (training_state_ == TrainingState::PreBackward) return false;
  training_state_ = TrainingState::PreBackward;
  ++pre_backwards_;
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

void FsdpUnit::set_post_forward_group(std::shared_ptr<comm::Communicator> group) {
  if (group && (replicated_ || group->size() < 2 || comms_.shard->size() % group->size() != 0))
    throw std::invalid_argument("fully_shard: unit '" + name_ + "': a post-forward group of " +
                                std::to_string(group->size()) + " ranks does not divide its shard group of " +
                                std::to_string(comms_.shard->size()));
  if (state_ == State::ShardedPostForward) reshard();
  post_forward_group_ = std::move(group);
}

int64_t FsdpUnit::post_forward_bytes() const {
  return post_forward_piece_.defined() ? post_forward_piece_.numel() * post_forward_piece_.element_size() : 0;
}

void FsdpUnit::unshard_async() {
  if (replicated_ || params_.empty() || state_ == State::Unsharded || gather_work_) return;
  for (auto& p : params_) p.alloc_unsharded();
  if (state_ == State::ShardedPostForward) {
    // The piece is already in param_dtype on the device: k pieces make the whole buffer.
    gather_work_ = all_gather_async(*post_forward_group_, post_forward_piece_, /*copy_in=*/false, device_,
                                    post_forward_piece_.scalar_type());
    return;
  }
  // Offload: the shard is copied to the compute device (host to host on CPU builds); mixed
  // precision: cast to param_dtype, so the all-gather moves param_dtype bytes.
  const bool copy_in = precision_.offload || param_dtype() != master_dtype_;
  gather_work_ = all_gather_async(*comms_.shard, flat_shard_, copy_in, device_, param_dtype());
}

void FsdpUnit::wait_unshard() {
  if (replicated_ || params_.empty() || state_ == State::Unsharded) return;
  if (!gather_work_) unshard_async();
  gather_work_->work.wait();
  at::Tensor output = gather_work_->output;
  gather_work_.reset();
  if (state_ == State::ShardedPostForward) {
    post_forward_piece_ = at::Tensor();
  } else if (post_forward_group_ && training_state_ == TrainingState::Forward) {
    // Member j of the post-forward group keeps shard ranks [j S/k, (j+1) S/k)'s chunks.
    const int64_t piece = output.numel() / post_forward_group_->size();
    post_forward_piece_ = output.narrow(0, post_forward_group_->rank() * piece, piece).clone();
  }
  all_gather_copy_out(params_, output, shard_total_);
  state_ = State::Unsharded;
}

void FsdpUnit::reshard() {
  if (replicated_ || state_ == State::Sharded) return;
  if (state_ == State::Unsharded)
    for (auto& p : params_) p.free_unsharded();
  post_forward_piece_ = at::Tensor();
  state_ = State::Sharded;
}

void FsdpUnit::reshard_post_forward() {
  if (replicated_ || state_ != State::Unsharded) return;
  if (!post_forward_piece_.defined()) return reshard();
  for (auto& p : params_) p.free_unsharded();
  state_ = State::ShardedPostForward;
}

void FsdpUnit::discard_unshard() {
  if (!gather_work_) return;
  gather_work_->work.wait();
  gather_work_.reset();
  for (auto& p : params_) p.free_unsharded();
  post_forward_piece_ = at::Tensor();
  state_ = State::Sharded;
}

void FsdpUnit::reduce_gradients_async(bool sync) {
  if (training_state_ != TrainingState::PostBackward)
    protocol_error("reduce_gradients_async", "gradients are reduced in post-backward, after the unit's backward");
  gradients_->issue(sync);
}

void FsdpUnit::finish_gradients() {
  // Sharded gradients take the flat shard's dtype and place (a replicated unit has none).
  gradients_->finish(replicated_ ? at::TensorOptions() : flat_shard_.options());
}

std::vector<at::Tensor> FsdpUnit::gather_full(bool gradients) {
  if (gradients && gradients_->in_flight())
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
      if (g.defined() && g.numel() > 0) input.narrow(0, p.offset(), g.numel()).copy_(g.reshape({-1}));
    }
  }
  // all_gather_async's rules, a group of one's identity included; waited on at once.
  PendingGather gather = all_gather_async(shard, input.to(device_), /*copy_in=*/false, device_, input.scalar_type());
  gather.work.wait();
  const at::Tensor& gathered = gather.output;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    // A gradient is undefined everywhere if it is undefined here (same params got grads).
    if (gradients && !defined[i]) {
      out.emplace_back();
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
      m.padding_bytes +=
          (p.layout().shard_rows - p.layout().valid_rows(comms_.shard->rank())) * p.layout().row_numel * es;
      if (p.sharded().grad().defined()) m.sharded_grad_bytes += p.sharded().grad().numel() * es;
    }
  }
  return m;
}

}  // namespace fsdpp::fsdp
