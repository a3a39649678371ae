// What PyTorch's CUDA caching allocator counts as allocated for one request that gets a
// fresh segment (c10/cuda/CUDACachingAllocator.cpp, 2.x): the request rounded up to 512
// bytes; requests above 1 MiB come from a segment of 20 MiB (up to 10 MiB) or of the
// request rounded up to 2 MiB, and the block is split off it only when more than 1 MiB
// would remain, else the whole segment is the block. So a 28.35 MB flat shard (a GPT-2
// 124M block in fp32) counts as 29.36 MB. The persistent bytes the benchmark reads on CUDA
// (allocated_bytes after setup) are these sizes, summed over the flat shard buffers.
#pragma once

#include <cstdint>

namespace fsdpp::plan {

int64_t cuda_allocated_bytes(int64_t requested_bytes);

}  // namespace fsdpp::plan
