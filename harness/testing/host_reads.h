// Counts the operators that make the host read a value computed by the device: on CUDA each
// is a host sync (the CPU waits for every kernel queued before it). Counted by name through
// ATen's RecordFunction, on every thread, while a HostReadCounter lives:
//   aten::_local_scalar_dense (Tensor::item(), a tensor in a condition); the operators
//   whose output shape depends on values (nonzero, masked_select, unique, repeat_interleave
//   with a tensor of repeats, bincount); and aten::copy_ from a device's tensor into host
//   memory (Tensor::cpu(), .to(kCPU)), pinned or not.
// On a CPU run the same calls are counted, so a test here sees every read the device-agnostic
// code would make on a GPU. Reads through data_ptr (host memory only: fsdpp's CPU loops)
// dispatch no operator and are not counted; they cannot run on a device's memory.
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/train/step_observer.h"

namespace fsdpp::harness {

class HostReadCounter {
 public:
  HostReadCounter();
  ~HostReadCounter();
  HostReadCounter(const HostReadCounter&) = delete;
  HostReadCounter& operator=(const HostReadCounter&) = delete;

  // Reads counted since construction.
  int64_t count() const;
  // Their operator names, in the order they ran.
  std::vector<std::string> names() const;

 private:
  at::CallbackHandle handle_ = 0;
};

// train()'s observer that counts the reads of each step, from the end of the step before
// (step 1's count includes the set-up's): by step, once train() returns.
class HostReadsPerStep final : public train::StepObserver {
 public:
  void after_step(int64_t steps_done, const std::function<void()>& settle) override;
  const std::map<int64_t, int64_t>& reads() const { return reads_; }

 private:
  HostReadCounter counter_;
  int64_t seen_ = 0;
  std::map<int64_t, int64_t> reads_;
};

}  // namespace fsdpp::harness
