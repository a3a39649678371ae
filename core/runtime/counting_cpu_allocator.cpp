#include "core/runtime/counting_cpu_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace fsdpp::runtime {

namespace {

// The wrapper keeps the wrapped allocator's pointers and contexts unchanged (its DataPtrs
// have context == data), so the raw interface stays valid, and remembers each counted
// block's size by its address: a free that finds no entry is a block from before
// installation, passed on uncounted.
class Counter final : public c10::Allocator {
 public:
  explicit Counter(c10::Allocator* inner) : inner_(inner), inner_delete_(inner->raw_deleter()) {}

  c10::DataPtr allocate(size_t n) override {
    void* data = inner_->raw_allocate(n);
    if (data != nullptr) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        sizes_[data] = n;
      }
      const int64_t live =
          live_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) + static_cast<int64_t>(n);
      raise_peak(live);
    }
    return {data, data, &free_counted, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_counted; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  void release(void* data) {
    if (data == nullptr) return;
    std::size_t n = 0;
    bool counted = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = sizes_.find(data);
      if (it != sizes_.end()) {
        n = it->second;
        counted = true;
        sizes_.erase(it);
      }
    }
    if (counted) live_.fetch_sub(static_cast<int64_t>(n), std::memory_order_relaxed);
    inner_delete_(data);
  }

  int64_t live() const { return live_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_.store(live(), std::memory_order_relaxed); }

 private:
  static void free_counted(void* data);

  void raise_peak(int64_t live) {
    int64_t seen = peak_.load(std::memory_order_relaxed);
    while (live > seen && !peak_.compare_exchange_weak(seen, live, std::memory_order_relaxed)) {
    }
  }

  c10::Allocator* inner_;
  c10::DeleterFnPtr inner_delete_;
  std::mutex mutex_;
  std::unordered_map<void*, std::size_t> sizes_;
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

// Created once and never destroyed: storage may be freed during static destruction.
std::atomic<Counter*> g_counter{nullptr};
std::mutex g_install_mutex;

void Counter::free_counted(void* data) { g_counter.load(std::memory_order_acquire)->release(data); }

}  // namespace

void CountingCpuAllocator::install() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_counter.load() != nullptr) return;
  c10::Allocator* current = c10::GetCPUAllocator();
  if (current->raw_deleter() == nullptr)
    throw std::runtime_error(
        "CountingCpuAllocator: the current CPU allocator has no raw deleter (its context is not its data); "
        "the counter wraps only such an allocator");
  auto* counter = new Counter(current);  // NOLINT(cppcoreguidelines-owning-memory): process lifetime, see above
  g_counter.store(counter, std::memory_order_release);
  c10::SetCPUAllocator(counter, kInstallPriority);
  if (c10::GetCPUAllocator() != counter)
    throw std::runtime_error("CountingCpuAllocator: another CPU allocator holds a priority above " +
                             std::to_string(kInstallPriority));
}

bool CountingCpuAllocator::installed() { return g_counter.load() != nullptr; }

int64_t CountingCpuAllocator::live_bytes() {
  auto* c = g_counter.load();
  return c == nullptr ? 0 : c->live();
}

int64_t CountingCpuAllocator::peak_bytes() {
  auto* c = g_counter.load();
  return c == nullptr ? 0 : c->peak();
}

void CountingCpuAllocator::reset_peak() {
  if (auto* c = g_counter.load()) c->reset_peak();
}

}  // namespace fsdpp::runtime
