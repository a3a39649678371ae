// Activation checkpointing for one call: the forward keeps only its input, and backward
// recomputes the forward (with grad) before backpropagating through it. This is the
// reentrant checkpoint of PyTorch (torch.utils.checkpoint, use_reentrant=True), which
// LibTorch lacks: the recomputed graph is run by a nested autograd backward, so gradients
// reach the parameters used inside fn through their .grad, as without checkpointing.
//
// The recomputation runs under the autocast state of the forward call (as
// torch.utils.checkpoint restores the forward's torch.autocast).
//
// Promises: the same ops on the same values in the same order as the call without
// checkpointing, hence bitwise-equal outputs and gradients, provided fn is deterministic
// (the RNG state is not saved and restored: fn must draw no random numbers, e.g. no
// dropout).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace fsdpp::nn {

// Returns fn(x), keeping no activation of fn for backward but x itself. x may be any
// tensor; an integer or non-differentiable x gets no gradient, but the parameters used in
// fn still do. fn must read no tensor that requires grad other than x and parameters
// (leaves): the recomputation could not route a gradient back to it. With grad mode off
// this is just fn(x).
at::Tensor checkpoint(std::function<at::Tensor(at::Tensor)> fn, at::Tensor x);

// The same for a call of several tensor inputs: fn(inputs), keeping only the inputs; each
// input that requires grad gets its gradient through the recomputation (as
// torch.utils.checkpoint does for every tensor argument).
at::Tensor checkpoint(std::function<at::Tensor(std::vector<at::Tensor>)> fn, std::vector<at::Tensor> inputs);

// A tensor fn computes that its caller reads beyond fn's output, and that must carry a
// gradient back into fn (a mixture of experts' router logits, which the load-balancing loss
// reads): `deliver` receives it.
//   - Outside a checkpointed call, deliver(t) at once.
//   - In a checkpointed forward, t has no graph; deliver receives, once fn has returned, an
//     extra output of the checkpoint's autograd node holding t's values. Its gradient joins
//     the output's in backward: the recomputation backpropagates both through fn.
//   - In a recomputation nothing is delivered (the forward did): t is the recomputed value
//     the delivered one's gradient flows through.
// A recomputation must produce as many side outputs as its forward did (std::logic_error).
void side_output(const at::Tensor& t, const std::function<void(at::Tensor)>& deliver);

// Whether this thread is inside the first (no-grad) forward of a checkpointed call, whose
// outputs will be recomputed in backward. Hooks use it to tell that forward from an
// evaluation under NoGradGuard.
bool in_checkpointed_forward();

// Whether this thread is recomputing a checkpointed forward, inside backward. Hooks use
// it to tell a recomputation from the iteration's forward.
bool recomputing();

// Counts one module call (nn::call counts each as it enters) in the innermost checkpointed
// forward or recomputation running on this thread, and returns whether the call is that
// recomputation's last: its forward counted as many. Outside both it counts nothing and
// returns false. A recomputation that makes fewer module calls than its forward did (one
// that checkpoints a nested module anew counts that module's calls apart) never reports a
// last call.
bool count_module_call();

// Whether nn::call_summed may skip a value in a recomputation (default true). false gives
// the full recomputation, for an A/B in one process (bench-step --full-recompute).
// Process-wide, like torch.backends flags. Thread-safe.
void set_recompute_skips_summed(bool skips);
bool recompute_skips_summed();

// Module calls that recomputations ran for their gradients only, without computing their
// value (nn::call_summed): recorded by the caller, counted for the whole process.
void record_call_without_value();
int64_t calls_without_value();

}  // namespace fsdpp::nn
