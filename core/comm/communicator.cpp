// The communicator's front end: it checks each collective's arguments, names the op for
// errors, and hands it to the first of the group's backends that serves its tensors
// (backend.h): Gloo for CPU tensors (gloo_backend.cpp, which says how every collective is
// built on a byte all-to-all), and in CUDA builds NCCL or host staging for CUDA tensors.
// It also owns the group's life: joining the world, subgroups, shutdown and abort.
#include "core/comm/communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <exception>
#include <mutex>
#include <numeric>
#include <sstream>

#include "core/comm/backend.h"
#include "core/comm/comm_work_state.h"
#include "core/comm/connect.h"
#include "core/comm/failure_board.h"
#include "core/comm/gloo_backend.h"
#include "core/comm/group_state.h"
#include "core/runtime/cuda_plugin.h"
#include "core/runtime/stopwatch.h"

namespace fsdpp::comm {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

// ---------------------------------------------------------------- CommWork

void CommWork::wait() {
  if (!state_) return;
  auto t0 = runtime::SteadyClock::now();
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (!state_->waited) {
    state_->waited = true;
    state_->stats->add_blocked(state_->kind, runtime::ms_since(t0));
  }
  if (!state_->error.empty()) throw CommError(state_->error);
  std::function<void()> on_wait = std::move(state_->on_wait);
  state_->on_wait = nullptr;
  lock.unlock();
  if (on_wait) on_wait();
}

bool CommWork::completed() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->done && state_->device_done) return state_->device_done();
  return state_->done;
}

// ---------------------------------------------------------------- Impl

struct Communicator::Impl {
  GroupState group;
  GlooBackend gloo{group};
  // CUDA tensors' backends, tried in order after Gloo (none in a CPU-only build).
  std::vector<std::unique_ptr<CollectiveBackend>> device_backends = make_device_backends(group, gloo);

  // The backend that moves `t`; throws CommError naming the op for a device no backend
  // of this build serves.
  CollectiveBackend& backend_for(const at::Tensor& t, const std::string& what) {
    if (!t.defined()) throw CommError("fsdpp comm: " + what + ": undefined tensor");
    if (gloo.serves(t)) return gloo;
    for (auto& backend : device_backends)
      if (backend->serves(t)) return *backend;
    if (device_backends_linked())
      throw CommError("fsdpp comm: " + what + ": tensor is on " + t.device().str() +
                      "; the communicator moves CPU and CUDA tensors");
    throw CommError("fsdpp comm: " + what + ": tensor is on " + t.device().str() +
                    " but this process moves CPU tensors only (CUDA plugin " + runtime::cuda_plugin_status() + ")");
  }
};

// ---------------------------------------------------------------- checks

namespace {

bool is_floating(at::ScalarType t) { return at::isFloatingType(t); }

void check_op_dtype(ReduceOp op, at::ScalarType dtype, const std::string& what) {
  if (op == ReduceOp::Avg && !is_floating(dtype))
    throw CommError("fsdpp comm: " + what + ": ReduceOp avg needs a floating dtype, got " +
                    std::string(c10::toString(dtype)));
  if (dtype == at::kBool) throw CommError("fsdpp comm: " + what + ": bool tensors cannot be reduced");
}

std::string op_label(const char* op, const at::Tensor& t) {
  std::ostringstream os;
  os << op << "(" << t.numel() << " x " << c10::toString(t.scalar_type()) << ")";
  return os.str();
}

void check_same_device(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  if (a.device() != b.device())
    throw CommError("fsdpp comm: " + what + ": output on " + a.device().str() + " but input on " + b.device().str());
}

// The rows (dim 0) of `t` and the elements in each; a scalar is one row of one element.
std::pair<int64_t, int64_t> rows_of(const at::Tensor& t) {
  if (t.dim() == 0) return {1, 1};
  int64_t rows = t.size(0);
  return {rows, rows == 0 ? 0 : t.numel() / rows};
}

}  // namespace

// ---------------------------------------------------------------- Communicator

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->gloo.start_worker(); }

Communicator::~Communicator() {
  // Destroyed while an exception unwinds (a failing rank): peers may never reach the
  // teardown handshake, so treat it as abort() rather than wait for the timeout.
  if (std::uncaught_exceptions() > 0) impl_->group.aborted = true;
  if (impl_->group.aborted) {
    // The communication thread may be stuck in a collective with a dead peer: leave it
    // (and everything it uses) alive for the few moments until the process exits.
    (void)impl_.release();
    return;
  }
  try {
    shutdown();
  } catch (...) {
  }
}

std::shared_ptr<Communicator> Communicator::connect(const WorldSpec& world, const CommOptions& options) {
  auto impl = std::make_unique<Impl>();
  GroupState& g = impl->group;
  g.name = options.name;
  g.rank = world.rank;
  g.size = world.world_size;
  g.timeout = options.timeout;
  g.local_world_size = world.local_world_size;
  if (world.world_size > 1) {
    auto joined = join_world(world, options.timeout);
    g.store = joined.store;
    g.board = joined.board;
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    auto listen = gloo_listen_for(world);
    if (!listen.interface.empty())
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(listen.interface));
    else if (!listen.address.empty())
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(listen.address));
    else
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdpp/" + options.name, g.store);
    std::vector<int> members(world.world_size);
    std::iota(members.begin(), members.end(), 0);
    int rank = world.rank, size = world.world_size;
    impl->gloo.set_process_group(connect_group(
        [prefixed, rank, size, gloo_options] {
          return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, gloo_options);
        },
        *g.board, options.name, members, world.rank, options.timeout));
  }
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

int Communicator::rank() const { return impl_->group.rank; }
int Communicator::size() const { return impl_->group.size; }
const std::string& Communicator::name() const { return impl_->group.name; }
CommStats& Communicator::stats() { return impl_->group.stats; }
bool Communicator::broken() const { return !impl_->group.broken().empty(); }

CommWork Communicator::all_gather_into_async(at::Tensor output, at::Tensor input) {
  std::string what = op_label("all_gather_into", input);
  impl_->backend_for(output, what);
  CollectiveBackend& backend = impl_->backend_for(input, what);
  if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() * size())
    throw CommError("fsdpp comm: " + what + ": output must hold size()*input.numel() = " +
                    std::to_string(input.numel() * size()) + " elements of the input's dtype, got " +
                    std::to_string(output.numel()) + " x " + c10::toString(output.scalar_type()));
  check_same_device(output, input, what);
  return backend.all_gather_into(output, input, what);
}

CommWork Communicator::reduce_scatter_async(at::Tensor output, at::Tensor input, ReduceOp op) {
  std::string what = op_label(("reduce_scatter[" + std::string(to_string(op)) + "]").c_str(), input);
  impl_->backend_for(output, what);
  CollectiveBackend& backend = impl_->backend_for(input, what);
  check_op_dtype(op, input.scalar_type(), what);
  if (output.scalar_type() != input.scalar_type() || input.numel() != output.numel() * size())
    throw CommError("fsdpp comm: " + what + ": input must hold size()*output.numel() = " +
                    std::to_string(output.numel() * size()) + " elements of the output's dtype, got " +
                    std::to_string(input.numel()) + " x " + c10::toString(input.scalar_type()));
  check_same_device(output, input, what);
  return backend.reduce_scatter(output, input, op, what);
}

CommWork Communicator::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  std::string what = op_label(("all_reduce[" + std::string(to_string(op)) + "]").c_str(), tensor);
  CollectiveBackend& backend = impl_->backend_for(tensor, what);
  check_op_dtype(op, tensor.scalar_type(), what);
  return backend.all_reduce(tensor, op, what);
}

CommWork Communicator::broadcast_async(at::Tensor tensor, int root) {
  std::string what = op_label(("broadcast[root " + std::to_string(root) + "]").c_str(), tensor);
  CollectiveBackend& backend = impl_->backend_for(tensor, what);
  if (root < 0 || root >= size())
    throw CommError("fsdpp comm: " + what + ": root must be in [0, " + std::to_string(size()) + ")");
  return backend.broadcast(tensor, root, what);
}

CommWork Communicator::all_to_all_single_async(at::Tensor output, at::Tensor input, std::vector<int64_t> output_splits,
                                               std::vector<int64_t> input_splits) {
  std::string what = op_label("all_to_all_single", input);
  impl_->backend_for(output, what);
  CollectiveBackend& backend = impl_->backend_for(input, what);
  int n = size();
  if (output.scalar_type() != input.scalar_type())
    throw CommError("fsdpp comm: " + what + ": output dtype " + c10::toString(output.scalar_type()) +
                    " differs from input dtype");
  auto resolve = [&](std::vector<int64_t>& splits, int64_t rows, const char* which) {
    if (splits.empty()) {
      if (rows % n != 0)
        throw CommError("fsdpp comm: " + what + ": " + which + " has " + std::to_string(rows) +
                        " rows, not divisible by the group size " + std::to_string(n) + "; pass splits");
      splits.assign(n, rows / n);
    }
    if (static_cast<int>(splits.size()) != n || std::accumulate(splits.begin(), splits.end(), int64_t{0}) != rows)
      throw CommError("fsdpp comm: " + what + ": " + which + "_splits must have " + std::to_string(n) +
                      " entries summing to its " + std::to_string(rows) + " rows");
    for (auto s : splits)
      if (s < 0) throw CommError("fsdpp comm: " + what + ": negative split in " + which + "_splits");
  };
  auto [out_rows, out_row_numel] = rows_of(output);
  auto [in_rows, in_row_numel] = rows_of(input);
  resolve(output_splits, out_rows, "output");
  resolve(input_splits, in_rows, "input");
  if (out_row_numel != in_row_numel && output.numel() > 0 && input.numel() > 0)
    throw CommError("fsdpp comm: " + what + ": output and input rows differ in size");
  check_same_device(output, input, what);
  AllToAllRows rows{std::move(output_splits), std::move(input_splits), out_row_numel, in_row_numel};
  return backend.all_to_all_single(output, input, rows, what);
}

CommWork Communicator::barrier_async() { return impl_->gloo.barrier("barrier"); }

std::shared_ptr<Communicator> Communicator::subgroup(const std::vector<int>& ranks, const std::string& name) {
  std::string what = "subgroup '" + name + "'";
  auto it = std::find(ranks.begin(), ranks.end(), rank());
  if (it == ranks.end())
    throw CommError("fsdpp comm: " + what + ": rank " + std::to_string(rank()) + " is not a member");
  for (int r : ranks)
    if (r < 0 || r >= size())
      throw CommError("fsdpp comm: " + what + ": rank " + std::to_string(r) + " is outside the world");
  const GroupState& parent = impl_->group;
  auto impl = std::make_unique<Impl>();
  GroupState& g = impl->group;
  g.name = parent.name + "/" + name;
  g.rank = static_cast<int>(it - ranks.begin());
  g.size = static_cast<int>(ranks.size());
  g.timeout = parent.timeout;
  g.local_world_size = parent.local_world_size;
  g.store = parent.store;
  g.board = parent.board;
  if (g.size > 1) {
    auto options = c10d::ProcessGroupGloo::Options::create(parent.timeout);
    options->devices = impl_->gloo.process_group()->getOptions()->devices;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdpp/" + g.name, parent.store);
    int rank = g.rank, size = g.size;
    impl->gloo.set_process_group(
        connect_group([prefixed, rank, size,
                       options] { return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, options); },
                      *g.board, g.name, ranks, g.rank, g.timeout));
  }
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

void Communicator::fail(const std::string& message, bool failed_here) {
  GroupState& g = impl_->group;
  if (g.board) {
    if (failed_here) g.board->post_own_failure(message);
    g.board->leave(std::min(g.timeout, kFailureLinger));
  }
  abort(message);
}

void Communicator::abort(const std::string& reason) {
  GroupState& g = impl_->group;
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.broken_reason.empty()) g.broken_reason = "aborted by this rank: " + reason;
  g.is_shut_down = true;
  g.aborted = true;
}

void Communicator::shutdown() {
  GroupState& g = impl_->group;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (g.is_shut_down) return;
    g.is_shut_down = true;
  }
  impl_->gloo.stop_worker();  // runs whatever was queued
  if (g.size > 1 && g.broken().empty() && g.store) {
    // Two-phase store barrier: nobody leaves before everyone arrived, and the store's
    // host (world rank 0) leaves last, after everyone has seen the release.
    std::string key = "fsdpp/" + g.name + "/shutdown/";
    try {
      g.store->setTimeout(g.timeout);
      if (g.store->add(key + "arrived", 1) == g.size) g.store->set(key + "release", std::vector<uint8_t>{1});
      g.store->wait({key + "release"});
      int64_t left = g.store->add(key + "left", 1);
      if (g.rank == 0 && left < g.size) g.store->wait({key + "all_left"});
      if (left == g.size) g.store->set(key + "all_left", std::vector<uint8_t>{1});
    } catch (const std::exception&) {
      // A peer vanished during teardown: nothing left to protect.
    }
  }
  for (auto& backend : impl_->device_backends) backend->disconnect();
  impl_->gloo.disconnect();
}

}  // namespace fsdpp::comm
