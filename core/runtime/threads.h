// Thread budgets for one rank. LibTorch's intra-op pool and OpenBLAS's pool are sized
// together so that ranks x threads never exceeds the machine's cores by accident.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fsdpp::runtime {

// Cores this process may use: $FSDPP_CORES when set to a positive number (a test runner
// running suites side by side gives each its share), else the CPUs `--bind-cores` gave
// this rank ($FSDPP_BOUND_CPUS, a cpulist), else sched_getaffinity, falling back to
// hardware_concurrency.
int available_cores();

// The CPUs this thread may run on (sched_getaffinity), ascending; empty if unknown.
std::vector<int> affinity_cpus();

// "0-3,6": a CPU list in the kernel's cpulist format (taskset -c, /proc/<pid>/status).
std::string cpu_list_text(const std::vector<int>& cpus);

// floor(cores / ranks_on_this_node), at least 1.
int default_threads_per_rank(int ranks_on_this_node);

// Calls f(begin, end) on contiguous pieces of [0, n) that cover it once, on up to
// at::get_num_threads() threads (the caller's among them), each piece at least
// `min_chunk` long; returns when every piece is done and rethrows the first exception.
// LibTorch's at::parallel_for runs serially in code built without -fopenmp, as fsdpp's
// is (its OpenMP runtime is the wheel's own), so fsdpp's host loops use this instead.
// Workers are threads of their own, allowed on every CPU of a `--bind-cores` slice.
void parallel_chunks(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& f);

// Sets LibTorch's intra-op threads and OpenBLAS's threads to `threads`, and exports
// OMP_NUM_THREADS / OPENBLAS_NUM_THREADS so processes we exec inherit the same budget.
void configure_threads(int threads);

}  // namespace fsdpp::runtime
