// Thread budgets for one rank. LibTorch's intra-op pool and OpenBLAS's pool are sized
// together so that ranks x threads never exceeds the machine's cores by accident.
#pragma once

namespace fsdpp::runtime {

// Cores this process may use: $FSDPP_CORES when set to a positive number (a test runner
// running suites side by side gives each its share), else sched_getaffinity, falling back
// to hardware_concurrency.
int available_cores();

// floor(cores / ranks_on_this_node), at least 1.
int default_threads_per_rank(int ranks_on_this_node);

// Sets LibTorch's intra-op threads and OpenBLAS's threads to `threads`, and exports
// OMP_NUM_THREADS / OPENBLAS_NUM_THREADS so processes we exec inherit the same budget.
void configure_threads(int threads);

}  // namespace fsdpp::runtime
