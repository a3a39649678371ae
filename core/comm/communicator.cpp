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

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <algorithm>
#include <sstream>
#include <thread>

#include "core/compat/torch_compat.h"

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
}

bool CommWork::completed() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
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
  int subgroups_created = 0;

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
    worker = std::thread([this] {
      at::init_num_threads();  // apply the process's intra-op thread budget here too
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
          std::string message = "fsdpp comm: " + label + " failed after " +
                                std::to_string(static_cast<int64_t>(ms_between(t0, Clock::now()))) +
                                " ms: " + first_line(e.what());
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
    auto work = gloo->alltoall_base(out, in, out_counts, in_counts);
    work->wait(timeout);
  }

  // Second phase of all-reduce and broadcast: every rank sends its chunk `mine` to all,
  // and `flat` receives chunk j (chunk_bytes[j] bytes) from rank j.
  void all_gather_chunks(CollectiveKind kind, const at::Tensor& flat, const at::Tensor& mine,
                         const std::vector<int64_t>& chunk_bytes) {
    at::Tensor staged = mine.repeat({size});
    alltoall_bytes(kind, bytes_of(flat), bytes_of(staged), chunk_bytes,
                   std::vector<int64_t>(size, chunk_bytes[rank]));
  }
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

void check_cpu(const at::Tensor& t, const std::string& what) {
  if (!t.defined()) throw CommError("fsdpp comm: " + what + ": undefined tensor");
  if (!t.device().is_cpu())
    throw CommError("fsdpp comm: " + what + ": tensor is on " + t.device().str() +
                    " but this build's communicator moves CPU tensors only");
}

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
  if (world.world_size > 1) {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(world.master_port);
    store_options.isServer = world.rank == 0;
    store_options.numWorkers = world.world_size;
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    try {
      impl->store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, store_options);
    } catch (const std::exception& e) {
      throw CommError("fsdpp comm: rank " + std::to_string(world.rank) + " could not join the TCPStore at " +
                      world.master_addr + ":" + std::to_string(world.master_port) + " within " +
                      std::to_string(options.timeout.count()) + " ms: " + Impl::first_line(e.what()));
    }
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
    bool loopback = world.master_addr == "localhost" || world.master_addr.rfind("127.", 0) == 0;
    if (iface != nullptr && *iface != '\0')
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
    else if (loopback)
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    try {
      auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdpp/" + options.name, impl->store);
      impl->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, world.rank, world.world_size, gloo_options);
    } catch (const std::exception& e) {
      throw CommError("fsdpp comm: rank " + std::to_string(world.rank) + " could not connect group '" +
                      options.name + "': " + Impl::first_line(e.what()));
    }
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
  check_cpu(output, what);
  check_cpu(input, what);
  if (output.scalar_type() != input.scalar_type() || output.numel() != input.numel() * size())
    throw CommError("fsdpp comm: " + what + ": output must hold size()*input.numel() = " +
                    std::to_string(input.numel() * size()) + " elements of the input's dtype, got " +
                    std::to_string(output.numel()) + " x " + c10::toString(output.scalar_type()));
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
  check_cpu(output, what);
  check_cpu(input, what);
  check_op_dtype(op, input.scalar_type(), what);
  if (output.scalar_type() != input.scalar_type() || input.numel() != output.numel() * size())
    throw CommError("fsdpp comm: " + what + ": input must hold size()*output.numel() = " +
                    std::to_string(output.numel() * size()) + " elements of the output's dtype, got " +
                    std::to_string(input.numel()) + " x " + c10::toString(input.scalar_type()));
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
  check_cpu(tensor, what);
  check_op_dtype(op, tensor.scalar_type(), what);
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
  check_cpu(tensor, what);
  if (root < 0 || root >= size())
    throw CommError("fsdpp comm: " + what + ": root must be in [0, " + std::to_string(size()) + ")");
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
  check_cpu(output, what);
  check_cpu(input, what);
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
    auto work = impl->gloo->barrier();
    work->wait(impl->timeout);
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
  impl->store = impl_->store;
  if (impl->size > 1) {
    auto options = c10d::ProcessGroupGloo::Options::create(impl_->timeout);
    options->devices = impl_->gloo->getOptions()->devices;
    try {
      auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdpp/" + impl->name, impl_->store);
      impl->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, impl->rank, impl->size, options);
    } catch (const std::exception& e) {
      throw CommError("fsdpp comm: rank " + std::to_string(rank()) + " could not connect " + what + ": " +
                      Impl::first_line(e.what()));
    }
  }
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
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
      if (s.store->add(key + "arrived", 1) == s.size) s.store->set(key + "release", {1});
      s.store->wait({key + "release"});
      int64_t left = s.store->add(key + "left", 1);
      if (s.rank == 0 && left < s.size) s.store->wait({key + "all_left"});
      if (left == s.size) s.store->set(key + "all_left", {1});
    } catch (const std::exception&) {
      // A peer vanished during teardown: nothing left to protect.
    }
  }
  s.gloo.reset();
}

}  // namespace fsdpp::comm
