#include "core/comm/nccl_backend.h"

#include <algorithm>
#include <numeric>

#include "core/comm/chunk_plan.h"
#include "core/comm/comm_work_state.h"
#include "core/comm/gloo_backend.h"
#include "core/comm/host_staged_backend.h"

namespace fsdpp::comm {

namespace {

// Ring-plan byte counts of a collective over n ranks moving `piece_bytes` per rank's piece
// (all-gather: the input; reduce-scatter: the output): n-1 pieces out, n-1 in.
int64_t ring_bytes(int n, int64_t piece_bytes) { return (n - 1) * piece_bytes; }

}  // namespace

bool NcclBackend::serves(const at::Tensor& t) const { return t.is_cuda() && nccl_usable(group_.local_world_size); }

NcclCommunicator& NcclBackend::nccl_group(at::Device device) {
  if (!nccl_) {
    std::string key = "fsdpp/" + group_.name + "/nccl_id";
    try {
      nccl_ = connect_nccl(group_.store, key, group_.rank, group_.size, device, group_.timeout, group_.where());
    } catch (const std::exception& e) {
      group_.mark_broken(first_line_of(e.what()));
      throw;
    }
  }
  if (nccl_->device() != device)
    throw CommError("fsdpp comm: tensor on " + device.str() + " but the group's NCCL communicator is on " +
                    nccl_->device().str() + " " + group_.where());
  return *nccl_;
}

CommWork NcclBackend::call(CollectiveKind kind, const std::string& what, int64_t sent, int64_t received,
                           std::vector<at::Tensor> outputs, const Issue& issue) {
  auto state = std::make_shared<CommWork::State>();
  state->kind = kind;
  state->stats = &group_.stats;
  state->done = true;
  std::string previous = group_.broken();
  if (!previous.empty()) {
    state->error = "fsdpp comm: " + what + " " + group_.where() +
                   " refused: the group is broken by an earlier failure: " + previous;
    return CommWorkAccess::make(state);
  }
  std::vector<at::Tensor> contiguous;
  contiguous.reserve(outputs.size());
  for (auto& t : outputs) contiguous.push_back(t.is_contiguous() ? t : at::empty_like(t, at::MemoryFormat::Contiguous));
  std::shared_ptr<NcclDone> done;
  try {
    done = issue(nccl_group(outputs.front().device()), contiguous);
  } catch (const std::exception& e) {
    state->error = first_line_of(e.what());
    group_.mark_broken(state->error);
    return CommWorkAccess::make(state);
  }
  group_.stats.add_transfer(kind, sent, received);
  group_.stats.add_call(kind, 0.0);  // device time is not measured per call
  state->device_done = [done] { return done->query(); };
  state->on_wait = [done, outputs, contiguous]() mutable {
    done->join();
    for (size_t i = 0; i < outputs.size(); ++i)
      if (!outputs[i].is_same(contiguous[i])) outputs[i].copy_(contiguous[i]);
  };
  return CommWorkAccess::make(state);
}

CommWork NcclBackend::all_gather_into(at::Tensor output, at::Tensor input, const std::string& what) {
  int64_t piece = input.numel() * input.element_size();
  int64_t moved = ring_bytes(group_.size, piece);
  return call(
      CollectiveKind::AllGather, what, moved, moved, {output},
      [input](NcclCommunicator& g, std::vector<at::Tensor>& out) { return g.all_gather(out[0], input.contiguous()); });
}

CommWork NcclBackend::reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op, const std::string& what) {
  int64_t piece = output.numel() * output.element_size();
  int64_t moved = ring_bytes(group_.size, piece);
  return call(CollectiveKind::ReduceScatter, what, moved, moved, {output},
              [input, op](NcclCommunicator& g, std::vector<at::Tensor>& out) {
                return g.reduce_scatter(out[0], input.contiguous(), op);
              });
}

CommWork NcclBackend::all_reduce(at::Tensor tensor, ReduceOp op, const std::string& what) {
  // The Gloo plan: reduce-scatter then all-gather of ceil(numel/n) chunks.
  int n = group_.size, me = group_.rank;
  auto chunks = chunk_byte_counts(tensor.numel(), n, tensor.element_size());
  int64_t others = std::accumulate(chunks.begin(), chunks.end(), int64_t{0}) - chunks[me];
  int64_t moved = others + (n - 1) * chunks[me];
  return call(CollectiveKind::AllReduce, what, moved, moved, {tensor},
              [op](NcclCommunicator& g, std::vector<at::Tensor>& t) { return g.all_reduce(t[0], op); });
}

CommWork NcclBackend::broadcast(at::Tensor tensor, int root, const std::string& what) {
  // The Gloo plan: root scatters chunks, then all-gather of the chunks.
  int n = group_.size, me = group_.rank;
  auto chunks = chunk_byte_counts(tensor.numel(), n, tensor.element_size());
  int64_t total = std::accumulate(chunks.begin(), chunks.end(), int64_t{0});
  int64_t sent = (me == root ? total - chunks[me] : 0) + (n - 1) * chunks[me];
  int64_t received = (me == root ? 0 : chunks[me]) + total - chunks[me];
  return call(CollectiveKind::Broadcast, what, sent, received, {tensor},
              [root](NcclCommunicator& g, std::vector<at::Tensor>& t) { return g.broadcast(t[0], root); });
}

CommWork NcclBackend::all_to_all_single(at::Tensor output, at::Tensor input, const AllToAllRows& rows,
                                        const std::string& what) {
  int64_t es = input.element_size(), sent = 0, received = 0;
  for (int j = 0; j < group_.size; ++j) {
    if (j == group_.rank) continue;
    sent += rows.input_splits[j] * rows.input_row_numel * es;
    received += rows.output_splits[j] * rows.output_row_numel * es;
  }
  int64_t row_numel = std::max(rows.input_row_numel, rows.output_row_numel);
  return call(CollectiveKind::AllToAll, what, sent, received, {output},
              [input, rows, row_numel](NcclCommunicator& g, std::vector<at::Tensor>& out) {
                return g.all_to_all(out[0], input.contiguous(), rows.output_splits, rows.input_splits, row_numel);
              });
}

}  // namespace fsdpp::comm
