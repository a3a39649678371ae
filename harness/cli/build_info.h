// What this fsdpp binary is and what it was built with: `fsdpp --version`.
#pragma once

#include <string>

namespace fsdpp::cli {

// Several lines, the last without a newline: fsdpp's version and git commit (with "+dirty" when the tree had
// uncommitted changes at build time), then the LibTorch, CUDA runtime and NCCL versions
// the binary was compiled against ("not built" for a CPU-only LibTorch). Build-time
// facts only: nothing here probes the machine.
std::string build_info();

}  // namespace fsdpp::cli
