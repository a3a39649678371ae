#include "harness/testing/host_reads.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace fsdpp::harness {

namespace {

// One counter at a time: the callback is global.
std::mutex g_mutex;
std::vector<std::string>* g_names = nullptr;

bool reads_device_value(const char* name) {
  static const char* const kReads[] = {"aten::_local_scalar_dense",
                                       "aten::nonzero",
                                       "aten::masked_select",
                                       "aten::_unique2",
                                       "aten::unique_dim",
                                       "aten::unique_consecutive",
                                       "aten::repeat_interleave",
                                       "aten::bincount",
                                       "aten::_unique"};
  for (const char* read : kReads)
    if (std::strcmp(name, read) == 0) return true;
  return false;
}

// copy_(self, src): into host memory from a device's.
bool copies_device_to_host(const char* name, const at::RecordFunction& fn) {
  if (std::strcmp(name, "aten::copy_") != 0) return false;
  const auto inputs = fn.inputs();
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor()) return false;
  return inputs[0].toTensor().device().is_cpu() && !inputs[1].toTensor().device().is_cpu();
}

std::unique_ptr<at::ObserverContext> on_operator(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (name != nullptr && (reads_device_value(name) || copies_device_to_host(name, fn))) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_names != nullptr) g_names->emplace_back(name);
  }
  return nullptr;
}

std::vector<std::string> g_storage;

}  // namespace

HostReadCounter::HostReadCounter() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_names != nullptr) throw std::logic_error("HostReadCounter: one at a time");
    g_storage.clear();
    g_names = &g_storage;
  }
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(on_operator).scopes({at::RecordScope::FUNCTION}).needsInputs(true));
}

HostReadCounter::~HostReadCounter() {
  at::removeCallback(handle_);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_names = nullptr;
}

int64_t HostReadCounter::count() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int64_t>(g_storage.size());
}

std::vector<std::string> HostReadCounter::names() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_storage;
}

void HostReadsPerStep::after_step(int64_t steps_done, const std::function<void()>& /*settle*/) {
  const int64_t now = counter_.count();
  reads_[steps_done] = now - seen_;
  seen_ = now;
}

}  // namespace fsdpp::harness
