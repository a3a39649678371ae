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

#include <functional>

namespace fsdpp::nn {

// Returns fn(x), keeping no activation of fn for backward but x itself. x may be any
// tensor; an integer or non-differentiable x gets no gradient, but the parameters used in
// fn still do. fn must read no tensor that requires grad other than x and parameters
// (leaves): the recomputation could not route a gradient back to it. With grad mode off
// this is just fn(x).
at::Tensor checkpoint(std::function<at::Tensor(at::Tensor)> fn, at::Tensor x);

// Whether this thread is inside the first (no-grad) forward of a checkpointed call, whose
// outputs will be recomputed in backward. Hooks use it to tell that forward from an
// evaluation under NoGradGuard.
bool in_checkpointed_forward();

// Whether this thread is recomputing a checkpointed forward, inside backward. Hooks use
// it to tell a recomputation from the iteration's forward.
bool recomputing();

}  // namespace fsdpp::nn
