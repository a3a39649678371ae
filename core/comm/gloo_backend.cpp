// How the collectives are carried out.
//
// Gloo in LibTorch 1.13 lacks a flat all-gather, any reduce-scatter, ReduceOp::AVG and
// bf16/int16 in data collectives. Rather than mixing native calls and fallbacks, every
// CPU collective is built on one primitive that works for all of them and is faster than
// Gloo's list all-gather on loopback (figures: docs/notes/2026-11-28-comments-moved.md):
// alltoall_base on raw bytes. On top of it:
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
#include "core/comm/gloo_backend.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/comm/chunk_plan.h"
#include "core/comm/comm_work_state.h"
#include "core/runtime/stopwatch.h"

namespace fsdpp::comm {

namespace {

// A contiguous 1-D uint8 view of `t`'s storage (t must be contiguous).
at::Tensor bytes_of(const at::Tensor& t) { return t.reshape({-1}).view(at::kByte); }

bool is_low_precision(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

// A failure another rank posted on the board while this rank waited in a collective.
class PostedFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How often a rank blocked in a collective reads the failure board.
constexpr std::chrono::milliseconds kBoardPollInterval{1000};

// How long a completed collective waits for c10d's worker thread to let go of it.
constexpr std::chrono::milliseconds kReleaseWait{50};

// out = op over the `parts` equal slices of `received` (flat, parts * out.numel()),
// combined in slice (= rank) order.
void reduce_slices(const at::Tensor& received, int parts, ReduceOp op, at::Tensor out) {
  int64_t m = out.numel();
  if (m == 0) return;
  auto slice = [&](int j) { return received.narrow(0, j * m, m); };
  if (op != ReduceOp::Max && !is_low_precision(out.scalar_type()) && out.is_contiguous()) {
    // Summed in place in `out`, in the same order: no temporary of the output's size.
    at::Tensor flat = out.view({-1});
    flat.copy_(slice(0));
    for (int j = 1; j < parts; ++j) flat.add_(slice(j));
    if (op == ReduceOp::Avg) flat.div_(parts);
    return;
  }
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

}  // namespace

// ---------------------------------------------------------------- the communication thread

void GlooBackend::set_process_group(c10::intrusive_ptr<c10d::ProcessGroupGloo> process_group) {
  gloo_ = std::move(process_group);
}

void GlooBackend::start_worker() {
  bool ready = false;  // under group_.mu
  worker_ = std::thread([this, &ready] {
    // Apply the process's intra-op thread budget here too. In LibTorch 1.13 this
    // rebuilds the process-wide pthreadpool (at::set_num_threads), so it must not
    // overlap anything else: the constructor waits for it. A worker still in here
    // when an abandoned (aborted) communicator's process exits races LibTorch's static
    // destructors: heap corruption (SIGABRT) or a hang in pthreadpool_destroy.
    at::init_num_threads();
    {
      std::lock_guard<std::mutex> lock(group_.mu);
      ready = true;
    }
    cv_.notify_all();
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(group_.mu);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  });
  std::unique_lock<std::mutex> lock(group_.mu);
  cv_.wait(lock, [&] { return ready; });
}

void GlooBackend::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(group_.mu);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void GlooBackend::disconnect() { gloo_.reset(); }

// Queues `body` on the communication thread; the returned work completes when it ran.
CommWork GlooBackend::submit(CollectiveKind kind, const std::string& what, std::function<void()> body) {
  auto state = std::make_shared<CommWork::State>();
  state->kind = kind;
  state->stats = &group_.stats;
  std::string label = what + " " + group_.where();
  auto finish = [state](std::string error) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->done = true;
      state->error = std::move(error);
    }
    state->cv.notify_all();
  };
  {
    std::lock_guard<std::mutex> lock(group_.mu);
    if (group_.is_shut_down) {
      finish("fsdpp comm: " + label + " issued after shutdown()");
      return CommWorkAccess::make(state);
    }
    queue_.emplace_back([this, kind, label, body = std::move(body), finish]() mutable {
      // `run` holds the collective's tensors: it is destroyed before finish() wakes the
      // waiter, so that they are not kept alive past wait() by a descheduled communication
      // thread (the rank's peak memory would then depend on thread timing).
      auto run = std::move(body);
      std::string previous = group_.broken();
      if (!previous.empty()) {
        run = nullptr;
        finish("fsdpp comm: " + label + " refused: the group is broken by an earlier failure: " + previous);
        return;
      }
      auto t0 = runtime::SteadyClock::now();
      std::string message;
      try {
        run();
        run = nullptr;
        group_.stats.add_call(kind, runtime::ms_since(t0));
      } catch (const std::exception& e) {
        run = nullptr;
        // Lead with what the board knows about the cause: which rank failed and why.
        std::string after = std::to_string(static_cast<int64_t>(runtime::ms_since(t0))) + " ms";
        if (dynamic_cast<const PostedFailure*>(&e) != nullptr)
          message = "fsdpp comm: " + std::string(e.what()) + "; here " + label + " stopped waiting after " + after;
        else if (group_.board)
          message = "fsdpp comm: " + group_.board->explain() + "; here " + label + " failed after " + after + ": " +
                    first_line_of(e.what());
        else
          message = "fsdpp comm: " + label + " failed after " + after + ": " + first_line_of(e.what());
        group_.mark_broken(message);
      }
      finish(message);
    });
  }
  cv_.notify_all();
  return CommWorkAccess::make(state);
}

// ---------------------------------------------------------------- transport

// The one transport primitive for CPU tensors: byte all-to-all with per-peer byte
// counts. Records what this rank sends to and receives from other ranks.
void GlooBackend::alltoall_bytes(CollectiveKind kind, at::Tensor out, at::Tensor in, std::vector<int64_t> out_counts,
                                 std::vector<int64_t> in_counts) {
  int64_t sent = 0, received = 0;
  for (int j = 0; j < group_.size; ++j) {
    if (j == group_.rank) continue;
    sent += in_counts[j];
    received += out_counts[j];
  }
  group_.stats.add_transfer(kind, sent, received);
  wait_for_work(gloo_->alltoall_base(out, in, out_counts, in_counts));
}

// Waits for a Gloo collective (Gloo's own timeout bounds it), reading the failure board
// every kBoardPollInterval meanwhile: a peer that failed while still alive (the store's
// host lingers so that the others can read its post) ends the wait at once, by name.
void GlooBackend::wait_for_work(const c10::intrusive_ptr<c10d::Work>& work) {
  if (group_.board) {
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
      if (auto posted = group_.board->posted_failure()) throw PostedFailure(*posted);
    }
  }
  work->wait(group_.timeout);  // rethrows the collective's own failure
  // c10d's worker thread marks a work completed before it drops its own reference to it
  // (ProcessGroupGloo::runLoop), and the work holds this collective's tensors. Until then
  // they stay alive on a thread fsdpp does not schedule, so that a rank's peak memory
  // would depend on that thread's timing (a block more or less at the loss). The wait is
  // bounded: past kReleaseWait the tensors are left to c10d.
  const auto until = runtime::SteadyClock::now() + kReleaseWait;
  while (work.use_count() > 1 && runtime::SteadyClock::now() < until) std::this_thread::yield();
}

// Second phase of all-reduce and broadcast: every rank sends its chunk `mine` to all,
// and `flat` receives chunk j (chunk_bytes[j] bytes) from rank j.
void GlooBackend::all_gather_chunks(CollectiveKind kind, const at::Tensor& flat, const at::Tensor& mine,
                                    const std::vector<int64_t>& chunk_bytes) {
  at::Tensor staged = mine.repeat({group_.size});
  alltoall_bytes(kind, bytes_of(flat), bytes_of(staged), chunk_bytes,
                 std::vector<int64_t>(group_.size, chunk_bytes[group_.rank]));
}

// ---------------------------------------------------------------- collectives

CommWork GlooBackend::all_gather_into(at::Tensor output, at::Tensor input, const std::string& what) {
  return submit(CollectiveKind::AllGather, what, [this, output, input] {
    int n = group_.size;
    at::Tensor out = output.is_contiguous() ? output : output.contiguous();
    if (n == 1) {
      out.view(input.sizes()).copy_(input);
    } else if (input.numel() > 0) {
      at::Tensor staged = input.reshape({-1}).repeat({n});  // one copy per destination
      int64_t piece = input.numel() * input.element_size();
      alltoall_bytes(CollectiveKind::AllGather, bytes_of(out), bytes_of(staged), std::vector<int64_t>(n, piece),
                     std::vector<int64_t>(n, piece));
    }
    if (!out.is_same(output)) output.copy_(out);
  });
}

CommWork GlooBackend::reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op, const std::string& what) {
  return submit(CollectiveKind::ReduceScatter, what, [this, output, input, op] {
    int n = group_.size;
    at::Tensor in = input.contiguous().reshape({-1});
    at::Tensor received = in;
    if (n > 1 && output.numel() > 0) {
      received = at::empty_like(in);
      int64_t piece = output.numel() * output.element_size();
      alltoall_bytes(CollectiveKind::ReduceScatter, bytes_of(received), bytes_of(in), std::vector<int64_t>(n, piece),
                     std::vector<int64_t>(n, piece));
    }
    reduce_slices(received, n, op, output);
  });
}

CommWork GlooBackend::all_reduce(at::Tensor tensor, ReduceOp op, const std::string& what) {
  return submit(CollectiveKind::AllReduce, what, [this, tensor, op] {
    int n = group_.size, me = group_.rank;
    if (n == 1 || tensor.numel() == 0) return;
    at::Tensor flat = tensor.contiguous().reshape({-1});
    int64_t es = flat.element_size();
    auto chunk_bytes = chunk_byte_counts(flat.numel(), n, es);
    int64_t m = chunk_bytes[me] / es;
    // Phase 1: reduce-scatter of ceil(numel/N) chunks.
    at::Tensor received = at::empty({n * m}, flat.options());
    alltoall_bytes(CollectiveKind::AllReduce, bytes_of(received), bytes_of(flat), std::vector<int64_t>(n, m * es),
                   chunk_bytes);
    at::Tensor mine = at::empty({m}, flat.options());
    reduce_slices(received, n, op, mine);
    // Phase 2: all-gather of the reduced chunks back into every rank's tensor.
    all_gather_chunks(CollectiveKind::AllReduce, flat, mine, chunk_bytes);
    if (flat.data_ptr() != tensor.data_ptr()) tensor.copy_(flat.view(tensor.sizes()));
  });
}

CommWork GlooBackend::broadcast(at::Tensor tensor, int root, const std::string& what) {
  return submit(CollectiveKind::Broadcast, what, [this, tensor, root] {
    int n = group_.size, me = group_.rank;
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
    alltoall_bytes(CollectiveKind::Broadcast, bytes_of(mine), bytes_of(scatter_in), out_counts, in_counts);
    // Phase 2: all-gather of the chunks.
    all_gather_chunks(CollectiveKind::Broadcast, flat, mine, chunk_bytes);
    if (flat.data_ptr() != tensor.data_ptr()) tensor.copy_(flat.view(tensor.sizes()));
  });
}

CommWork GlooBackend::all_to_all_single(at::Tensor output, at::Tensor input, const AllToAllRows& rows,
                                        const std::string& what) {
  return submit(CollectiveKind::AllToAll, what, [this, output, input, rows] {
    int n = group_.size;
    at::Tensor out = output.is_contiguous() ? output : output.contiguous();
    at::Tensor in = input.contiguous();
    if (n == 1) {
      if (out.numel() > 0) out.view({-1}).copy_(in.reshape({-1}));
    } else {
      int64_t es = input.element_size();
      std::vector<int64_t> out_bytes(n), in_bytes(n);
      for (int j = 0; j < n; ++j) {
        out_bytes[j] = rows.output_splits[j] * rows.output_row_numel * es;
        in_bytes[j] = rows.input_splits[j] * rows.input_row_numel * es;
      }
      alltoall_bytes(CollectiveKind::AllToAll, bytes_of(out), bytes_of(in), out_bytes, in_bytes);
    }
    if (!out.is_same(output)) output.copy_(out);
  });
}

CommWork GlooBackend::barrier(const std::string& what) {
  return submit(CollectiveKind::Barrier, what, [this] {
    if (group_.size == 1) return;
    wait_for_work(gloo_->barrier());
  });
}

}  // namespace fsdpp::comm
