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

int available_cores() {
  // A test runner that runs several suites side by side gives each a share of the cores.
  if (const char* share = std::getenv("FSDPP_CORES")) {
    const int cores = std::atoi(share);
    if (cores >= 1) return cores;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
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
