// What the LibTorch we run on can compute, probed at run time (the same binary may run
// against LibTorch 1.13 or 2.x).
#pragma once

namespace fsdpp::runtime {

// True if CPU fp16 matmul and LayerNorm exist (LibTorch 1.13's CPU kernels have neither:
// "not implemented for 'Half'"). Probed once.
bool cpu_has_fp16_kernels();

}  // namespace fsdpp::runtime
