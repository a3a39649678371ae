// How the collectives are carried out.
//
// Gloo in LibTorch 1.13 lacks a flat all-gather, any reduce-scatter, ReduceOp::AVG and
// bf16/int16 in data collectives. Rather than mixing native calls and fallbacks, every
// CPU collective is built on one primitive that works for all of them and was measured
// fastest here: alltoall_base on raw bytes (~2 GB/s on loopback against 0.2-0.8 GB/s for
// Gloo's list all-gather at 4-64 MB). On top of it:
// - all-gather: the input repeated size() times goes out as one all-to-all. Costs one
//   extra local copy of the output's size; wire bytes are the ring's (N-1)/N * output.
// - reduce-scatter: chunk j goes to rank j, then a local sum of the N received chunks
//   in rank order. Costs a receive buffer of the input's size; wire bytes are the ring's.
// - all-reduce: reduce-scatter then all-gather of the reduced chunks (the ring's
//   2(N-1)/N volume); chunks are ceil(numel/N) long, the last ones shorter or empty.
// - broadcast: root scatters chunks, then all-gather (scatter-allgather broadcast).
// - AVG: SUM, then one division. bf16/fp16 travel as bytes and are summed in fp32.
// A side effect we rely on later: because the sum is local and in rank order, every
// reduction is bitwise deterministic for a given world size.
#include "core/comm/communicator.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <algorithm>
#include <sstream>
#include <thread>

#include "core/comm/connect.h"
#include "core/comm/failure_board.h"
#include "core/compat/torch_compat.h"
#if FSDPP_WITH_CUDA
#include "core/comm/nccl_group.h"
#endif

namespace fsdpp::comm {

using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// A contiguous 1-D uint8 view of `t`'s storage (t must be contiguous).
at::Tensor bytes_of(const at::Tensor& t) { return t.reshape({-1}).view(at::kByte); }

bool is_low_precision(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

bool is_floating(at::ScalarType t) { return at::isFloatingType(t); }

// Element range [begin, end) of chunk j when `numel` is cut into `parts` chunks of
// ceil(numel/parts): the tail chunks may be short or empty.
std::pair<int64_t, int64_t> chunk_range(int64_t numel, int parts, int j) {
  int64_t chunk = (numel + parts - 1) / parts;
  int64_t begin = std::min<int64_t>(numel, chunk * j);
  int64_t end = std::min<int64_t>(numel, begin + chunk);
  return {begin, end};
}

// Bytes of each of the `parts` chunks (chunk_range) of a flat tensor.
std::vector<int64_t> chunk_byte_counts(int64_t numel, int parts, int64_t element_size) {
  std::vector<int64_t> counts(parts);
  for (int j = 0; j < parts; ++j) {
    auto [b, e] = chunk_range(numel, parts, j);
    counts[j] = (e - b) * element_size;
  }
  return counts;
}

// A failure another rank posted on the board while this rank waited in a collective.
class PostedFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How often a rank blocked in a collective reads the failure board.
constexpr std::chrono::milliseconds kBoardPollInterval{1000};

}  // namespace

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

// ---------------------------------------------------------------- CommWork

struct CommWork::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty on success
  CollectiveKind kind = CollectiveKind::Barrier;
  CommStats* stats = nullptr;
  bool waited = false;
  // Runs once in the first wait() after success, in the waiting thread: the caller's CUDA
  // stream joins an NCCL collective, or host results are copied back to the device.
  std::function<void()> on_wait;
  // Device-side completion (NCCL): done on the host at issue, finished when this says so.
  std::function<bool()> device_done;
};

void CommWork::wait() {
  if (!state_) return;
  auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (!state_->waited) {
    state_->waited = true;
    state_->stats->add_blocked(state_->kind, ms_between(t0, Clock::now()));
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
  std::string name;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{};
  c10::intrusive_ptr<c10d::Store> store;        // shared by the world and its subgroups
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
  CommStats stats;
  std::shared_ptr<FailureBoard> board;  // the world's, shared by its subgroups; null alone
  int subgroups_created = 0;
  int local_world_size = 1;  // decides whether CUDA tensors can use NCCL (one GPU per rank)
#if FSDPP_WITH_CUDA
  std::unique_ptr<NcclGroup> nccl;  // connected at the group's first NCCL collective
#endif

  // The communication thread and its FIFO.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  bool is_shut_down = false;
  bool aborted = false;
  std::string broken_reason;  // set once, under mu
  std::thread worker;

  void start_worker() {
    bool ready = false;  // under mu
    worker = std::thread([this, &ready] {
      // Apply the process's intra-op thread budget here too. In LibTorch 1.13 this
      // rebuilds the process-wide pthreadpool (at::set_num_threads), so it must not
      // overlap anything else: the constructor waits for it. A worker still in here
      // when an abandoned (aborted) communicator's process exits races LibTorch's static
      // destructors: heap corruption (SIGABRT) or a hang in pthreadpool_destroy.
      at::init_num_threads();
      {
        std::lock_guard<std::mutex> lock(mu);
        ready = true;
      }
      cv.notify_all();
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stopping || !queue.empty(); });
          if (queue.empty()) return;
          task = std::move(queue.front());
          queue.pop_front();
        }
        task();
      }
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return ready; });
  }

  void stop_worker() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }

  std::string where() const {
    return "on group '" + name + "' (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  }

  std::string broken() {
    std::lock_guard<std::mutex> lock(mu);
    return broken_reason;
  }

  // Queues `body` on the communication thread; the returned work completes when it ran.
  CommWork submit(CollectiveKind kind, std::string what, std::function<void()> body) {
    auto state = std::make_shared<CommWork::State>();
    state->kind = kind;
    state->stats = &stats;
    std::string label = what + " " + where();
    auto finish = [state](std::string error) {
      {
        std::lock_guard<std::mutex> lock(state->mu);
        state->done = true;
        state->error = std::move(error);
      }
      state->cv.notify_all();
    };
    {
      std::lock_guard<std::mutex> lock(mu);
      if (is_shut_down) {
        finish("fsdpp comm: " + label + " issued after shutdown()");
        return CommWork(state);
      }
      queue.push_back([this, kind, label, body = std::move(body), finish] {
        std::string previous = broken();
        if (!previous.empty()) {
          finish("fsdpp comm: " + label + " refused: the group is broken by an earlier failure: " + previous);
          return;
        }
        auto t0 = Clock::now();
        try {
          body();
          stats.add_call(kind, ms_between(t0, Clock::now()));
          finish("");
        } catch (const std::exception& e) {
          // Lead with what the board knows about the cause: which rank failed and why.
          std::string after = std::to_string(static_cast<int64_t>(ms_between(t0, Clock::now()))) + " ms";
          std::string message;
          if (dynamic_cast<const PostedFailure*>(&e) != nullptr)
            message = "fsdpp comm: " + std::string(e.what()) + "; here " + label + " stopped waiting after " + after;
          else if (board)
            message = "fsdpp comm: " + board->explain() + "; here " + label + " failed after " + after + ": " +
                      first_line(e.what());
          else
            message = "fsdpp comm: " + label + " failed after " + after + ": " + first_line(e.what());
          {
            std::lock_guard<std::mutex> lock(mu);
            if (broken_reason.empty()) broken_reason = message;
          }
          finish(message);
        }
      });
    }
    cv.notify_all();
    return CommWork(state);
  }

  static std::string first_line(const std::string& text) {
    auto nl = text.find('\n');
    return nl == std::string::npos ? text : text.substr(0, nl);
  }

  // The one transport primitive for CPU tensors: byte all-to-all with per-peer byte
  // counts. Records what this rank sends to and receives from other ranks.
  void alltoall_bytes(CollectiveKind kind, at::Tensor out, at::Tensor in, std::vector<int64_t> out_counts,
                      std::vector<int64_t> in_counts) {
    int64_t sent = 0, received = 0;
    for (int j = 0; j < size; ++j) {
      if (j == rank) continue;
      sent += in_counts[j];
      received += out_counts[j];
    }
    stats.add_transfer(kind, sent, received);
    wait_for_work(gloo->alltoall_base(out, in, out_counts, in_counts));
  }

  // Waits for a Gloo collective (Gloo's own timeout bounds it), reading the failure board
  // every kBoardPollInterval meanwhile: a peer that failed while still alive (the store's
  // host lingers so that the others can read its post) ends the wait at once, by name.
  void wait_for_work(const c10::intrusive_ptr<c10d::Work>& work) {
    if (board) {
      struct Signal {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
      };
      auto signal = std::make_shared<Signal>();
      work->getFuture()->addCallback(
          [signal](c10::ivalue::Future&) {
            {
              std::lock_guard<std::mutex> lock(signal->mu);
              signal->done = true;
            }
            signal->cv.notify_all();
          },
          /*uses_future=*/false);
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(signal->mu);
          if (signal->cv.wait_for(lock, kBoardPollInterval, [&] { return signal->done; })) break;
        }
        if (auto posted = board->posted_failure()) throw PostedFailure(*posted);
      }
    }
    work->wait(timeout);  // rethrows the collective's own failure
  }

  // Second phase of all-reduce and broadcast: every rank sends its chunk `mine` to all,
  // and `flat` receives chunk j (chunk_bytes[j] bytes) from rank j.
  void all_gather_chunks(CollectiveKind kind, const at::Tensor& flat, const at::Tensor& mine,
                         const std::vector<int64_t>& chunk_bytes) {
    at::Tensor staged = mine.repeat({size});
    alltoall_bytes(kind, bytes_of(flat), bytes_of(staged), chunk_bytes,
                   std::vector<int64_t>(size, chunk_bytes[rank]));
  }

  // CUDA tensors that cannot use NCCL (ranks sharing a GPU): the collective ran on host
  // copies; the caller's wait() copies the host result back into the device tensor.
  static CommWork copy_back_on_wait(CommWork work, at::Tensor device_out, at::Tensor host_out) {
    if (work.state_) {
      std::lock_guard<std::mutex> lock(work.state_->mu);
      work.state_->on_wait = [device_out, host_out]() mutable { device_out.copy_(host_out); };
    }
    return work;
  }

#if FSDPP_WITH_CUDA
  bool via_nccl(const at::Tensor& t) const { return t.is_cuda() && nccl_usable(local_world_size); }

  NcclGroup& nccl_group(at::Device device) {
    if (!nccl) {
      std::string key = "fsdpp/" + name + "/nccl_id";
      try {
        nccl = NcclGroup::connect(store.get(), key, rank, size, device, timeout, where());
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (broken_reason.empty()) broken_reason = first_line(e.what());
        throw;
      }
    }
    if (nccl->device() != device)
      throw CommError("fsdpp comm: tensor on " + device.str() + " but the group's NCCL communicator is on " +
                      nccl->device().str() + " " + where());
    return *nccl;
  }

  // Issues an NCCL collective on `output`'s device: `issue` gets contiguous stand-ins of
  // `outputs` (copied back after the caller's stream joined). Byte tallies are the same
  // transfer plan the Gloo path records.
  CommWork nccl_call(CollectiveKind kind, const std::string& what, int64_t sent, int64_t received,
                     std::vector<at::Tensor> outputs,
                     const std::function<std::shared_ptr<NcclDone>(NcclGroup&, std::vector<at::Tensor>&)>& issue) {
    auto state = std::make_shared<CommWork::State>();
    state->kind = kind;
    state->stats = &stats;
    state->done = true;
    std::string previous = broken();
    if (!previous.empty()) {
      state->error = "fsdpp comm: " + what + " " + where() + " refused: the group is broken by an earlier failure: " +
                     previous;
      return CommWork(state);
    }
    std::vector<at::Tensor> contiguous;
    for (auto& t : outputs) contiguous.push_back(t.is_contiguous() ? t : at::empty_like(t, at::MemoryFormat::Contiguous));
    std::shared_ptr<NcclDone> done;
    try {
      done = issue(nccl_group(outputs.front().device()), contiguous);
    } catch (const std::exception& e) {
      state->error = first_line(e.what());
      std::lock_guard<std::mutex> lock(mu);
      if (broken_reason.empty()) broken_reason = state->error;
      return CommWork(state);
    }
    stats.add_transfer(kind, sent, received);
    stats.add_call(kind, 0.0);  // device time is not measured per call
    state->device_done = [done] { return done->query(); };
    state->on_wait = [done, outputs, contiguous]() mutable {
      done->join();
      for (size_t i = 0; i < outputs.size(); ++i)
        if (!outputs[i].is_same(contiguous[i])) outputs[i].copy_(contiguous[i]);
    };
    return CommWork(state);
  }
#endif
};

// ---------------------------------------------------------------- reductions

namespace {

// out = op over the `parts` equal slices of `received` (flat, parts * out.numel()),
// combined in slice (= rank) order.
void reduce_slices(const at::Tensor& received, int parts, ReduceOp op, at::Tensor out) {
  int64_t m = out.numel();
  if (m == 0) return;
  auto slice = [&](int j) { return received.narrow(0, j * m, m); };
  at::Tensor acc;
  if (op == ReduceOp::Max) {
    acc = slice(0).clone();
    for (int j = 1; j < parts; ++j) acc = at::maximum(acc, slice(j));
  } else {
    bool widen = is_low_precision(out.scalar_type());
    acc = widen ? slice(0).to(at::kFloat) : slice(0).clone();
    for (int j = 1; j < parts; ++j) acc.add_(slice(j));
    if (op == ReduceOp::Avg) acc.div_(parts);
  }
  out.copy_(acc.view(out.sizes()));
}

void check_op_dtype(ReduceOp op, at::ScalarType dtype, const std::string& what) {
  if (op == ReduceOp::Avg && !is_floating(dtype))
    throw CommError("fsdpp comm: " + what + ": ReduceOp avg needs a floating dtype, got " +
                    std::string(c10::toString(dtype)));
  if (dtype == at::kBool) throw CommError("fsdpp comm: " + what + ": bool tensors cannot be reduced");
}

std::string describe(const char* op, const at::Tensor& t) {
  std::ostringstream os;
  os << op << "(" << t.numel() << " x " << c10::toString(t.scalar_type()) << ")";
  return os.str();
}

void check_device(const at::Tensor& t, const std::string& what) {
  if (!t.defined()) throw CommError("fsdpp comm: " + what + ": undefined tensor");
#if FSDPP_WITH_CUDA
  if (!t.device().is_cpu() && !t.device().is_cuda())
    throw CommError("fsdpp comm: " + what + ": tensor is on " + t.device().str() +
                    "; the communicator moves CPU and CUDA tensors");
#else
  if (!t.device().is_cpu())
    throw CommError("fsdpp comm: " + what + ": tensor is on " + t.device().str() +
                    " but this build's communicator moves CPU tensors only");
#endif
}

void check_same_device(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  if (a.device() != b.device())
    throw CommError("fsdpp comm: " + what + ": output on " + a.device().str() + " but input on " + b.device().str());
}

#if FSDPP_WITH_CUDA
// Ring-plan byte counts of a collective over n ranks moving `bytes` per rank's piece
// (all-gather: the input; reduce-scatter: the output): n-1 pieces out, n-1 in.
int64_t ring_bytes(int n, int64_t piece_bytes) { return (n - 1) * piece_bytes; }
#endif

}  // namespace

// ---------------------------------------------------------------- Communicator

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->start_worker(); }

Communicator::~Communicator() {
  // Destroyed while an exception unwinds (a failing rank): peers may never reach the
  // teardown handshake, so treat it as abort() rather than wait for the timeout.
  if (std::uncaught_exceptions() > 0) impl_->aborted = true;
  if (impl_->aborted) {
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
  impl->name = options.name;
  impl->rank = world.rank;
  impl->size = world.world_size;
  impl->timeout = options.timeout;
  impl->local_world_size = world.local_world_size;
  if (world.world_size > 1) {
    auto joined = join_world(world, options.timeout);
    impl->store = joined.store;
    impl->board = joined.board;
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    auto listen = gloo_listen_for(world);
    if (!listen.interface.empty())
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(listen.interface));
    else if (!listen.address.empty())
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(listen.address));
    else
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdpp/" + options.name, impl->store);
    std::vector<int> members(world.world_size);
    std::iota(members.begin(), members.end(), 0);
    int rank = world.rank, size = world.world_size;
    impl->gloo = connect_group(
        [prefixed, rank, size, gloo_options] {
          return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, gloo_options);
        },
        *impl->board, options.name, members, world.rank, options.timeout);
  }
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
const std::string& Communicator::name() const { return impl_->name; }
CommStats& Communicator::stats() { return impl_->stats; }
bool Communicator::broken() const { return !impl_->broken().empty(); }

CommWork Communicator::all_gather_into_async(at::Tensor output, at::Tensor input) {
  std::string what = describe("all_gather_into", input);
  check_device(output, what);
  check_device(input, what);
  if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() * size())
    throw CommError("fsdpp comm: " + what + ": output must hold size()*input.numel() = " +
                    std::to_string(input.numel() * size()) + " elements of the input's dtype, got " +
                    std::to_string(output.numel()) + " x " + c10::toString(output.scalar_type()));
  check_same_device(output, input, what);
  if (input.is_cuda()) {
#if FSDPP_WITH_CUDA
    if (impl_->via_nccl(input)) {
      int64_t piece = input.numel() * input.element_size();
      return impl_->nccl_call(CollectiveKind::AllGather, what, ring_bytes(size(), piece), ring_bytes(size(), piece),
                              {output}, [input](NcclGroup& g, std::vector<at::Tensor>& out) {
                                return g.all_gather(out[0], input.contiguous());
                              });
    }
#endif
    at::Tensor host_out = at::empty(output.sizes(), output.options().device(at::kCPU));
    return Impl::copy_back_on_wait(all_gather_into_async(host_out, input.cpu()), output, host_out);
  }
  Impl* impl = impl_.get();
  return impl->submit(CollectiveKind::AllGather, what, [impl, output, input] {
    int n = impl->size;
    at::Tensor out = output.is_contiguous() ? output : output.contiguous();
    if (n == 1) {
      out.view(input.sizes()).copy_(input);
    } else if (input.numel() > 0) {
      at::Tensor staged = input.reshape({-1}).repeat({n});  // one copy per destination
      int64_t piece = input.numel() * input.element_size();
      impl->alltoall_bytes(CollectiveKind::AllGather, bytes_of(out), bytes_of(staged),
                           std::vector<int64_t>(n, piece), std::vector<int64_t>(n, piece));
    }
    if (!out.is_same(output)) output.copy_(out);
  });
}

CommWork Communicator::reduce_scatter_async(at::Tensor output, at::Tensor input, ReduceOp op) {
  std::string what = describe(("reduce_scatter[" + std::string(to_string(op)) + "]").c_str(), input);
  check_device(output, what);
  check_device(input, what);
  check_op_dtype(op, input.scalar_type(), what);
  if (output.scalar_type() != input.scalar_type() || input.numel() != output.numel() * size())
    throw CommError("fsdpp comm: " + what + ": input must hold size()*output.numel() = " +
                    std::to_string(output.numel() * size()) + " elements of the output's dtype, got " +
                    std::to_string(input.numel()) + " x " + c10::toString(input.scalar_type()));
  check_same_device(output, input, what);
  if (input.is_cuda()) {
#if FSDPP_WITH_CUDA
    if (impl_->via_nccl(input)) {
      int64_t piece = output.numel() * output.element_size();
      return impl_->nccl_call(CollectiveKind::ReduceScatter, what, ring_bytes(size(), piece),
                              ring_bytes(size(), piece), {output},
                              [input, op](NcclGroup& g, std::vector<at::Tensor>& out) {
                                return g.reduce_scatter(out[0], input.contiguous(), op);
                              });
    }
#endif
    at::Tensor host_out = at::empty(output.sizes(), output.options().device(at::kCPU));
    return Impl::copy_back_on_wait(reduce_scatter_async(host_out, input.cpu(), op), output, host_out);
  }
  Impl* impl = impl_.get();
  return impl->submit(CollectiveKind::ReduceScatter, what, [impl, output, input, op] {
    int n = impl->size;
    at::Tensor in = input.contiguous().reshape({-1});
    at::Tensor received = in;
    if (n > 1 && output.numel() > 0) {
      received = at::empty_like(in);
      int64_t piece = output.numel() * output.element_size();
      impl->alltoall_bytes(CollectiveKind::ReduceScatter, bytes_of(received), bytes_of(in),
                           std::vector<int64_t>(n, piece), std::vector<int64_t>(n, piece));
    }
    reduce_slices(received, n, op, output);
  });
}

CommWork Communicator::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  std::string what = describe(("all_reduce[" + std::string(to_string(op)) + "]").c_str(), tensor);
  check_device(tensor, what);
  check_op_dtype(op, tensor.scalar_type(), what);
  if (tensor.is_cuda()) {
#if FSDPP_WITH_CUDA
    if (impl_->via_nccl(tensor)) {
      // The Gloo path's plan: reduce-scatter then all-gather of ceil(numel/n) chunks.
      int n = size(), me = rank();
      auto chunks = chunk_byte_counts(tensor.numel(), n, tensor.element_size());
      int64_t others = std::accumulate(chunks.begin(), chunks.end(), int64_t{0}) - chunks[me];
      int64_t moved = others + (n - 1) * chunks[me];
      return impl_->nccl_call(CollectiveKind::AllReduce, what, moved, moved, {tensor},
                              [op](NcclGroup& g, std::vector<at::Tensor>& t) { return g.all_reduce(t[0], op); });
    }
#endif
    at::Tensor host = tensor.cpu();
    return Impl::copy_back_on_wait(all_reduce_async(host, op), tensor, host);
  }
  Impl* impl = impl_.get();
  return impl->submit(CollectiveKind::AllReduce, what, [impl, tensor, op] {
    int n = impl->size, me = impl->rank;
    if (n == 1 || tensor.numel() == 0) return;
    at::Tensor flat = tensor.contiguous().reshape({-1});
    int64_t es = flat.element_size();
    auto chunk_bytes = chunk_byte_counts(flat.numel(), n, es);
    int64_t m = chunk_bytes[me] / es;
    // Phase 1: reduce-scatter of ceil(numel/N) chunks.
    at::Tensor received = at::empty({n * m}, flat.options());
    impl->alltoall_bytes(CollectiveKind::AllReduce, bytes_of(received), bytes_of(flat),
                         std::vector<int64_t>(n, m * es), chunk_bytes);
    at::Tensor mine = at::empty({m}, flat.options());
    reduce_slices(received, n, op, mine);
    // Phase 2: all-gather of the reduced chunks back into every rank's tensor.
    impl->all_gather_chunks(CollectiveKind::AllReduce, flat, mine, chunk_bytes);
    if (flat.data_ptr() != tensor.data_ptr()) tensor.copy_(flat.view(tensor.sizes()));
  });
}

CommWork Communicator::broadcast_async(at::Tensor tensor, int root) {
  std::string what = describe(("broadcast[root " + std::to_string(root) + "]").c_str(), tensor);
  check_device(tensor, what);
  if (root < 0 || root >= size())
    throw CommError("fsdpp comm: " + what + ": root must be in [0, " + std::to_string(size()) + ")");
  if (tensor.is_cuda()) {
#if FSDPP_WITH_CUDA
    if (impl_->via_nccl(tensor)) {
      // The Gloo path's plan: root scatters chunks, then all-gather of the chunks.
      int n = size(), me = rank();
      auto chunks = chunk_byte_counts(tensor.numel(), n, tensor.element_size());
      int64_t total = std::accumulate(chunks.begin(), chunks.end(), int64_t{0});
      int64_t sent = (me == root ? total - chunks[me] : 0) + (n - 1) * chunks[me];
      int64_t received = (me == root ? 0 : chunks[me]) + total - chunks[me];
      return impl_->nccl_call(CollectiveKind::Broadcast, what, sent, received, {tensor},
                              [root](NcclGroup& g, std::vector<at::Tensor>& t) { return g.broadcast(t[0], root); });
    }
#endif
    at::Tensor host = tensor.cpu();
    return Impl::copy_back_on_wait(broadcast_async(host, root), tensor, host);
  }
  Impl* impl = impl_.get();
  return impl->submit(CollectiveKind::Broadcast, what, [impl, tensor, root] {
    int n = impl->size, me = impl->rank;
    if (n == 1 || tensor.numel() == 0) return;
    at::Tensor flat = tensor.contiguous().reshape({-1});
    auto chunk_bytes = chunk_byte_counts(flat.numel(), n, flat.element_size());
    auto [my_begin, my_end] = chunk_range(flat.numel(), n, me);
    // Phase 1: root scatters chunk j to rank j.
    at::Tensor mine = flat.narrow(0, my_begin, my_end - my_begin).clone();
    std::vector<int64_t> in_counts(n, 0), out_counts(n, 0);
    if (me == root) in_counts = chunk_bytes;
    out_counts[root] = chunk_bytes[me];
    at::Tensor scatter_in = me == root ? flat : at::empty({0}, flat.options());
    impl->alltoall_bytes(CollectiveKind::Broadcast, bytes_of(mine), bytes_of(scatter_in), out_counts, in_counts);
    // Phase 2: all-gather of the chunks.
    impl->all_gather_chunks(CollectiveKind::Broadcast, flat, mine, chunk_bytes);
    if (flat.data_ptr() != tensor.data_ptr()) tensor.copy_(flat.view(tensor.sizes()));
  });
}

CommWork Communicator::all_to_all_single_async(at::Tensor output, at::Tensor input,
                                               std::vector<int64_t> output_splits,
                                               std::vector<int64_t> input_splits) {
  std::string what = describe("all_to_all_single", input);
  check_device(output, what);
  check_device(input, what);
  int n = size();
  if (output.scalar_type() != input.scalar_type())
    throw CommError("fsdpp comm: " + what + ": output dtype " + c10::toString(output.scalar_type()) +
                    " differs from input dtype");
  auto resolve = [&](std::vector<int64_t>& splits, const at::Tensor& t, const char* which) {
    int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (splits.empty()) {
      if (rows % n != 0)
        throw CommError("fsdpp comm: " + what + ": " + which + " has " + std::to_string(rows) +
                        " rows, not divisible by the group size " + std::to_string(n) + "; pass splits");
      splits.assign(n, rows / n);
    }
    if (static_cast<int>(splits.size()) != n ||
        std::accumulate(splits.begin(), splits.end(), int64_t{0}) != rows)
      throw CommError("fsdpp comm: " + what + ": " + which + "_splits must have " + std::to_string(n) +
                      " entries summing to its " + std::to_string(rows) + " rows");
    for (auto s : splits)
      if (s < 0) throw CommError("fsdpp comm: " + what + ": negative split in " + which + "_splits");
  };
  resolve(output_splits, output, "output");
  resolve(input_splits, input, "input");
  int64_t out_row = output.dim() == 0 ? 1 : (output.size(0) == 0 ? 0 : output.numel() / output.size(0));
  int64_t in_row = input.dim() == 0 ? 1 : (input.size(0) == 0 ? 0 : input.numel() / input.size(0));
  if (out_row != in_row && output.numel() > 0 && input.numel() > 0)
    throw CommError("fsdpp comm: " + what + ": output and input rows differ in size");
  check_same_device(output, input, what);
  if (input.is_cuda()) {
#if FSDPP_WITH_CUDA
    if (impl_->via_nccl(input)) {
      int64_t es = input.element_size(), sent = 0, received = 0;
      for (int j = 0; j < n; ++j) {
        if (j == rank()) continue;
        sent += input_splits[j] * in_row * es;
        received += output_splits[j] * out_row * es;
      }
      int64_t row_numel = std::max(in_row, out_row);
      return impl_->nccl_call(CollectiveKind::AllToAll, what, sent, received, {output},
                              [input, output_splits, input_splits, row_numel](NcclGroup& g, std::vector<at::Tensor>& out) {
                                return g.all_to_all(out[0], input.contiguous(), output_splits, input_splits, row_numel);
                              });
    }
#endif
    at::Tensor host_out = at::empty(output.sizes(), output.options().device(at::kCPU));
    return Impl::copy_back_on_wait(all_to_all_single_async(host_out, input.cpu(), output_splits, input_splits),
                                   output, host_out);
  }
  Impl* impl = impl_.get();
  return impl->submit(CollectiveKind::AllToAll, what,
                      [impl, output, input, output_splits, input_splits, out_row, in_row] {
                        int n = impl->size;
                        at::Tensor out = output.is_contiguous() ? output : output.contiguous();
                        at::Tensor in = input.contiguous();
                        if (n == 1) {
                          if (out.numel() > 0) out.view({-1}).copy_(in.reshape({-1}));
                        } else {
                          int64_t es = input.element_size();
                          std::vector<int64_t> out_bytes(n), in_bytes(n);
                          for (int j = 0; j < n; ++j) {
                            out_bytes[j] = output_splits[j] * out_row * es;
                            in_bytes[j] = input_splits[j] * in_row * es;
                          }
                          impl->alltoall_bytes(CollectiveKind::AllToAll, bytes_of(out), bytes_of(in), out_bytes,
                                               in_bytes);
                        }
                        if (!out.is_same(output)) output.copy_(out);
                      });
}

CommWork Communicator::barrier_async() {
  Impl* impl = impl_.get();
  return impl->submit(CollectiveKind::Barrier, "barrier", [impl] {
    if (impl->size == 1) return;
    impl->wait_for_work(impl->gloo->barrier());
  });
}

std::shared_ptr<Communicator> Communicator::subgroup(const std::vector<int>& ranks, const std::string& name) {
  std::string what = "subgroup '" + name + "'";
  auto it = std::find(ranks.begin(), ranks.end(), rank());
  if (it == ranks.end())
    throw CommError("fsdpp comm: " + what + ": rank " + std::to_string(rank()) + " is not a member");
  for (int r : ranks)
    if (r < 0 || r >= size())
      throw CommError("fsdpp comm: " + what + ": rank " + std::to_string(r) + " is outside the world");
  auto impl = std::make_unique<Impl>();
  impl->name = impl_->name + "/" + name;
  impl->rank = static_cast<int>(it - ranks.begin());
  impl->size = static_cast<int>(ranks.size());
  impl->timeout = impl_->timeout;
  impl->local_world_size = impl_->local_world_size;
  impl->store = impl_->store;
  impl->board = impl_->board;
  if (impl->size > 1) {
    auto options = c10d::ProcessGroupGloo::Options::create(impl_->timeout);
    options->devices = impl_->gloo->getOptions()->devices;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdpp/" + impl->name, impl_->store);
    int rank = impl->rank, size = impl->size;
    impl->gloo = connect_group(
        [prefixed, rank, size, options] {
          return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, options);
        },
        *impl->board, impl->name, ranks, impl->rank, impl->timeout);
  }
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

void Communicator::fail(const std::string& message, bool failed_here) {
  if (impl_->board) {
    if (failed_here) impl_->board->post_own_failure(message);
    impl_->board->leave(std::min(impl_->timeout, kFailureLinger));
  }
  abort(message);
}

void Communicator::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->broken_reason.empty()) impl_->broken_reason = "aborted by this rank: " + reason;
  impl_->is_shut_down = true;
  impl_->aborted = true;
}

void Communicator::shutdown() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.is_shut_down) return;
    s.is_shut_down = true;
  }
  s.stop_worker();  // runs whatever was queued
  if (s.size > 1 && s.broken().empty() && s.store) {
    // Two-phase store barrier: nobody leaves before everyone arrived, and the store's
    // host (world rank 0) leaves last, after everyone has seen the release.
    std::string key = "fsdpp/" + s.name + "/shutdown/";
    try {
      s.store->setTimeout(s.timeout);
      if (s.store->add(key + "arrived", 1) == s.size) s.store->set(key + "release", std::vector<uint8_t>{1});
      s.store->wait({key + "release"});
      int64_t left = s.store->add(key + "left", 1);
      if (s.rank == 0 && left < s.size) s.store->wait({key + "all_left"});
      if (left == s.size) s.store->set(key + "all_left", std::vector<uint8_t>{1});
    } catch (const std::exception&) {
      // A peer vanished during teardown: nothing left to protect.
    }
  }
#if FSDPP_WITH_CUDA
  s.nccl.reset();
#endif
  s.gloo.reset();
}

}  // namespace fsdpp::comm
