#include "core/comm/nccl_group.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/comm/communicator.h"
#include "core/runtime/cuda_plugin.h"

namespace fsdpp::comm {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kChar: return ncclInt8;
    case at::kByte:
    case at::kBool: return ncclUint8;
    default: throw CommError(std::string("fsdpp comm (nccl): dtype ") + c10::toString(t) + " is not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

}  // namespace

// Named, not anonymous: NcclGroup::Impl (external linkage) holds a deque of these.
namespace nccl_detail {

class Done final : public NcclDone {
 public:
  Done(std::string label, std::chrono::steady_clock::time_point issued) : label(std::move(label)), issued(issued) {}
  void join() override { event.block(at::cuda::getCurrentCUDAStream(event.device_index())); }
  bool query() const override { return event.query(); }

  at::cuda::CUDAEvent event;
  std::string label;
  std::chrono::steady_clock::time_point issued;
};

}  // namespace nccl_detail

using nccl_detail::Done;

bool nccl_usable(int local_world_size) {
  if (const char* forced = std::getenv("FSDPP_CUDA_COMM")) {
    if (std::strcmp(forced, "gloo") == 0) return false;
    if (std::strcmp(forced, "nccl") == 0) return true;
  }
  return at::cuda::is_available() && local_world_size <= static_cast<int>(at::cuda::device_count());
}

struct NcclGroup::Impl {
  ncclComm_t comm = nullptr;
  at::Device device{at::kCUDA, 0};
  int rank = 0, size = 1;
  std::string label;
  std::chrono::milliseconds timeout{};
  std::optional<c10::cuda::CUDAStream> stream;

  // Watchdog over the collectives in flight (issue order = completion order on one stream).
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Done>> in_flight;
  std::string broken;  // set once, under mu
  bool stopping = false;
  bool aborted = false;
  std::thread watchdog;

  void check(ncclResult_t result, const std::string& what) {
    if (result == ncclSuccess || result == ncclInProgress) return;
    std::string message = "fsdpp comm (nccl): " + what + " " + label + " failed: " + ncclGetErrorString(result);
    const char* detail = ncclGetLastError(comm);
    if (detail != nullptr && *detail != '\0') message += " (" + std::string(detail) + ")";
    throw CommError(message);
  }

  void run_watchdog() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      cv.wait_for(lock, std::chrono::milliseconds(50));
      while (!in_flight.empty() && in_flight.front()->query()) in_flight.pop_front();
      if (in_flight.empty() || !broken.empty()) continue;
      auto& oldest = in_flight.front();
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - oldest->issued);
      if (waited < timeout) continue;
      broken = "fsdpp comm (nccl): " + oldest->label + " not done after " + std::to_string(waited.count()) +
               " ms (timeout); the NCCL communicator was aborted";
      ncclCommAbort(comm);
      aborted = true;
    }
  }

  // Queues `body` (NCCL calls) on the group's stream after the caller's pending work.
  template <typename Body>
  std::shared_ptr<NcclDone> enqueue(const std::string& what, const std::vector<at::Tensor>& tensors, Body body) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!broken.empty()) throw CommError(what + " " + label + " refused: " + broken);
    }
    c10::cuda::CUDAGuard guard(device);
    auto caller = at::cuda::getCurrentCUDAStream(device.index());
    at::cuda::CUDAEvent ready;
    ready.record(caller);
    ready.block(*stream);
    for (const auto& t : tensors)
      if (t.defined() && t.numel() > 0) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), *stream);
    body(stream->stream());
    auto done = std::make_shared<Done>(what + " " + label, Clock::now());
    done->event.record(*stream);
    {
      std::lock_guard<std::mutex> lock(mu);
      in_flight.push_back(done);
    }
    return done;
  }
};

std::unique_ptr<NcclGroup> NcclGroup::connect(c10d::Store* store, const std::string& key, int rank, int size,
                                              at::Device device, std::chrono::milliseconds timeout, std::string label) {
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->rank = rank;
  impl->size = size;
  impl->label = std::move(label);
  impl->timeout = timeout;
  c10::cuda::CUDAGuard guard(device);
  ncclUniqueId id;
  if (rank == 0) {
    impl->check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (size > 1) {
      auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    }
  } else {
    try {
      store->wait({key}, timeout);
    } catch (const std::exception& e) {
      throw CommError("fsdpp comm (nccl): rank " + std::to_string(rank) + " got no NCCL id from rank 0 " + impl->label +
                      " within " + std::to_string(timeout.count()) + " ms");
    }
    auto bytes = store->get(key);
    if (bytes.size() != sizeof(id)) throw CommError("fsdpp comm (nccl): malformed NCCL id " + impl->label);
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  impl->check(ncclCommInitRank(&impl->comm, size, id, rank), "ncclCommInitRank");
  impl->stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index());
  Impl* raw = impl.get();
  impl->watchdog = std::thread([raw] { raw->run_watchdog(); });
  return std::unique_ptr<NcclGroup>(new NcclGroup(std::move(impl)));
}

NcclGroup::NcclGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<NcclCommunicator> connect_nccl(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
                                               int rank, int size, at::Device device, std::chrono::milliseconds timeout,
                                               std::string label) {
  runtime::NcclEngine engine;
  try {
    engine = runtime::nccl_engine();
  } catch (const std::invalid_argument& e) {
    throw CommError(std::string("fsdpp comm: ") + e.what());
  }
  if (engine == runtime::NcclEngine::C10d)
    return connect_process_group_nccl(store, key, rank, size, device, timeout, std::move(label));
  return NcclGroup::connect(store.get(), key, rank, size, device, timeout, std::move(label));
}

NcclGroup::~NcclGroup() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  if (impl_->aborted) return;
  // Destroying a communicator with work in flight blocks on it; a stuck one is aborted.
  auto deadline = Clock::now() + impl_->timeout;
  bool idle = true;
  for (auto& done : impl_->in_flight)
    while (!done->query()) {
      if (Clock::now() > deadline) {
        idle = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  if (idle)
    ncclCommDestroy(impl_->comm);
  else
    ncclCommAbort(impl_->comm);
}

at::Device NcclGroup::device() const { return impl_->device; }

std::shared_ptr<NcclDone> NcclGroup::all_gather(const at::Tensor& output, const at::Tensor& input) {
  Impl& s = *impl_;
  return s.enqueue("all_gather", {output, input}, [&](cudaStream_t stream) {
    s.check(ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                          nccl_dtype(input.scalar_type()), s.comm, stream),
            "ncclAllGather");
  });
}

std::shared_ptr<NcclDone> NcclGroup::reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  Impl& s = *impl_;
  return s.enqueue("reduce_scatter", {output, input}, [&](cudaStream_t stream) {
    s.check(ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                              nccl_dtype(input.scalar_type()), nccl_op(op), s.comm, stream),
            "ncclReduceScatter");
  });
}

std::shared_ptr<NcclDone> NcclGroup::all_reduce(const at::Tensor& tensor, ReduceOp op) {
  Impl& s = *impl_;
  return s.enqueue("all_reduce", {tensor}, [&](cudaStream_t stream) {
    s.check(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                          nccl_dtype(tensor.scalar_type()), nccl_op(op), s.comm, stream),
            "ncclAllReduce");
  });
}

std::shared_ptr<NcclDone> NcclGroup::broadcast(const at::Tensor& tensor, int root) {
  Impl& s = *impl_;
  return s.enqueue("broadcast", {tensor}, [&](cudaStream_t stream) {
    s.check(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                          nccl_dtype(tensor.scalar_type()), root, s.comm, stream),
            "ncclBroadcast");
  });
}

std::shared_ptr<NcclDone> NcclGroup::all_to_all(const at::Tensor& output, const at::Tensor& input,
                                                const std::vector<int64_t>& output_rows,
                                                const std::vector<int64_t>& input_rows, int64_t row_numel) {
  Impl& s = *impl_;
  return s.enqueue("all_to_all", {output, input}, [&](cudaStream_t stream) {
    // Byte-wise send/recv pairs in one NCCL group (NCCL has no all-to-all of its own).
    const int64_t row_bytes = row_numel * input.element_size();
    auto* in = static_cast<char*>(input.data_ptr());
    auto* out = static_cast<char*>(output.data_ptr());
    s.check(ncclGroupStart(), "ncclGroupStart");
    int64_t in_offset = 0, out_offset = 0;
    for (int peer = 0; peer < s.size; ++peer) {
      size_t send = static_cast<size_t>(input_rows[peer] * row_bytes);
      size_t recv = static_cast<size_t>(output_rows[peer] * row_bytes);
      if (send > 0) s.check(ncclSend(in + in_offset, send, ncclUint8, peer, s.comm, stream), "ncclSend");
      if (recv > 0) s.check(ncclRecv(out + out_offset, recv, ncclUint8, peer, s.comm, stream), "ncclRecv");
      in_offset += static_cast<int64_t>(send);
      out_offset += static_cast<int64_t>(recv);
    }
    s.check(ncclGroupEnd(), "ncclGroupEnd");
  });
}

void NcclGroup::synchronize() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      if (!impl_->broken.empty()) throw CommError(impl_->broken);
      bool all_done = true;
      for (auto& done : impl_->in_flight) all_done = all_done && done->query();
      if (all_done) return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace fsdpp::comm
