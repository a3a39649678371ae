#include "core/runtime/threads.h"

#include <ATen/Parallel.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <thread>

// OpenBLAS reads OPENBLAS_NUM_THREADS only when it is loaded, which happens before
// main(); its runtime setter is the only way to size its pool afterwards. Weak, so the
// binary still links and runs where the BLAS provider is not OpenBLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace fsdpp::runtime {

namespace {

// The CPUs of a cpulist ("0-3,6" -> 0 1 2 3 6); empty when the text is not one.
std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t dash = item.find('-');
    try {
      size_t used = 0;
      const int first = std::stoi(item.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? item.size() : dash)) return {};
      const int last = dash == std::string::npos ? first : std::stoi(item.substr(dash + 1));
      if (first < 0 || last < first || last >= CPU_SETSIZE) return {};
      for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    } catch (const std::exception&) {
      return {};
    }
    pos = end + 1;
  }
  return cpus;
}

// A worker of parallel_chunks may run on every CPU of the rank's `--bind-cores` slice:
// threads inherit their creator's mask, and OpenMP binds the main thread to the slice's
// first CPU (OMP_PROC_BIND=close), which would put every worker on that one CPU.
void widen_to_bound_slice() {
  const char* bound = std::getenv("FSDPP_BOUND_CPUS");
  if (bound == nullptr) return;
  const auto cpus = parse_cpu_list(bound);
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);  // best effort: a refusal leaves the inherited mask
}

}  // namespace

int available_cores() {
  // A test runner that runs several suites side by side gives each a share of the cores.
  if (const char* share = std::getenv("FSDPP_CORES")) {
    const int cores = std::atoi(share);
    if (cores >= 1) return cores;
  }
  // A rank pinned by `--bind-cores`: its slice, as the launcher gave it. Its own mask may
  // already be narrower: OpenMP binds the main thread to the first CPU of the slice.
  if (const char* bound = std::getenv("FSDPP_BOUND_CPUS")) {
    const int cores = static_cast<int>(parse_cpu_list(bound).size());
    if (cores >= 1) return cores;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<int> affinity_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) text += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

int default_threads_per_rank(int ranks_on_this_node) {
  return std::max(1, available_cores() / std::max(1, ranks_on_this_node));
}

void parallel_chunks(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& f) {
  if (n <= 0) return;
  const int64_t threads = std::min<int64_t>(
      at::get_num_threads(), (n + std::max<int64_t>(1, min_chunk) - 1) / std::max<int64_t>(1, min_chunk));
  if (threads <= 1) {
    f(0, n);
    return;
  }
  const int64_t per_thread = (n + threads - 1) / threads;
  std::vector<std::exception_ptr> failures(static_cast<size_t>(threads));
  auto run_part = [&](int64_t t) {
    try {
      const int64_t begin = std::min(n, t * per_thread), end = std::min(n, (t + 1) * per_thread);
      if (begin < end) f(begin, end);
    } catch (...) {
      failures[static_cast<size_t>(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads - 1));
  for (int64_t t = 1; t < threads; ++t)
    workers.emplace_back([&, t] {
      widen_to_bound_slice();
      run_part(t);
    });
  run_part(0);
  for (auto& w : workers) w.join();
  for (const auto& failure : failures)
    if (failure) std::rethrow_exception(failure);
}

void configure_threads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(threads);
  std::string text = std::to_string(threads);
  setenv("OMP_NUM_THREADS", text.c_str(), 1);
  setenv("OPENBLAS_NUM_THREADS", text.c_str(), 1);
}

}  // namespace fsdpp::runtime
