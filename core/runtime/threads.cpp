#include "core/runtime/threads.h"

#include <ATen/Parallel.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

// OpenBLAS reads OPENBLAS_NUM_THREADS only when it is loaded, which happens before
// main(); its runtime setter is the only way to size its pool afterwards. Weak, so the
// binary still links and runs where the BLAS provider is not OpenBLAS.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace fsdpp::runtime {

namespace {

// CPUs in a cpulist ("0-3,6" -> 5); 0 when the text is not one.
int cpu_list_count(const std::string& text) {
  int count = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t dash = item.find('-');
    try {
      size_t used = 0;
      const int first = std::stoi(item.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? item.size() : dash)) return 0;
      const int last = dash == std::string::npos ? first : std::stoi(item.substr(dash + 1));
      if (first < 0 || last < first) return 0;
      count += last - first + 1;
    } catch (const std::exception&) {
      return 0;
    }
    pos = end + 1;
  }
  return count;
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
    const int cores = cpu_list_count(bound);
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

void configure_threads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(threads);
  std::string text = std::to_string(threads);
  setenv("OMP_NUM_THREADS", text.c_str(), 1);
  setenv("OPENBLAS_NUM_THREADS", text.c_str(), 1);
}

}  // namespace fsdpp::runtime
