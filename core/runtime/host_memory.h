// How a training process's host heap (glibc malloc) treats large blocks.
//
// By default glibc serves a block of 32 MiB or more with its own mmap and unmaps it on
// free, and trims free memory above 128 KiB off the heap top. A training step allocates
// and frees the same large activations (logits, attention scores, gradient buffers)
// every iteration, so each step page-faults them in again (a measurable share of a CPU
// step: docs/notes/2026-11-28-comments-moved.md).
#pragma once

#include <cstddef>

namespace fsdpp::runtime {

// Raises glibc's mmap and trim thresholds to `bytes`: blocks below it come from the heap
// and freed ones stay there for the next step, as a caching allocator would keep them
// (Intel's torch.backends.xeon.run_cpu preloads jemalloc or tcmalloc for the same reason).
// Cost: between steps the resident set keeps the step's peak working set. Process-wide;
// call it before training allocates.
// Returns false when glibc refuses a threshold (the process then keeps glibc's defaults
// for that one), and in a sanitizer build, whose heap is not glibc's (nothing is set).
bool keep_freed_host_memory(std::size_t bytes = std::size_t{1} << 30);

// Whether keep_freed_host_memory() succeeded in this process: "kept", else "glibc", or
// "sanitizer" in a sanitizer build (for benchmark records and the CLI's warning).
const char* host_heap_policy();

}  // namespace fsdpp::runtime
