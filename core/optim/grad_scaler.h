// Dynamic loss scaling for fp16 training over FSDP shards: PyTorch's GradScaler with
// ShardedGradScaler's one-collective inf check, so that every rank skips the same steps.
//
// One step, in this order (clipping must see unscaled gradients):
//   scaler.scale(loss).backward();
//   scaler.unscale(params);            // optional here; step() does it if not done
//   sharded->clip_grad_norm(max_norm);
//   scaler.step(optimizer, params);    // false: a rank found inf/NaN, every rank skipped
//   scaler.update();
// `params` are what the optimizer steps: the local shards (ShardedModel::parameters()).
//
// Rules (torch.cuda.amp.GradScaler / torch.distributed.fsdp.ShardedGradScaler):
// - scale(loss) = loss * scale, computed in fp32 (or the loss's dtype if wider) and
//   returned in the loss's dtype.
// - unscale: every defined gradient g *= 1/scale in place, the reciprocal rounded to fp32
//   once and the product taken in fp32 for fp16/bf16 gradients (as
//   _amp_foreach_non_finite_check_and_unscale_); found_inf is whether any element was
//   inf or NaN before unscaling, on any rank of the group (one all-reduce, Max).
// - step: unscales if not done, then runs optimizer.step() unless found_inf.
// - update: found_inf: scale *= backoff_factor, growth_tracker = 0. Otherwise
//   growth_tracker += 1, and when it reaches growth_interval, scale *= growth_factor
//   (kept only if finite, as _amp_update_scale_) and growth_tracker = 0. The scale is an
//   fp32 value, as PyTorch's scale tensor.
// - A disabled scaler is a pass-through: scale() returns the loss, unscale() does nothing,
//   step() always steps, update() does nothing, current_scale() is 1.
// - Per step (between update()s): at most one unscale and one step, then update; a call
//   out of this order throws std::logic_error.
//
// State (for checkpoints), format "fsdpp.grad-scaler" version 1, a JSON object with
// exactly these keys:
//   "format": "fsdpp.grad-scaler", "version": 1,
//   "enabled": bool, "scale": number (finite, > 0, an fp32 value),
//   "growth_tracker": integer in [0, growth_interval),
//   "growth_factor": number > 1, "backoff_factor": number in (0, 1),
//   "growth_interval": integer >= 1.
// load_state replaces this scaler's options with the saved ones (as load_state_dict);
// it rejects any other key, a missing or mistyped key, another format or version, an
// out-of-range value, and an enabled=false state loaded into an enabled scaler, with
// std::invalid_argument naming the key and what was expected. A disabled scaler checks a
// state the same way and keeps nothing of it.
//
// Not thread-safe; one scaler per optimizer. The group must contain every rank that steps
// this model (the world, also for hybrid sharding), and all of them must call unscale()
// (or step()) in the same steps, as for any collective.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <vector>

#include "core/comm/communicator.h"

namespace fsdpp::optim {

inline constexpr const char* kGradScalerFormat = "fsdpp.grad-scaler";
inline constexpr int kGradScalerVersion = 1;

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, PyTorch's defaults throughout
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class ShardedGradScaler {
 public:
  // group may be null (one process: no collective). Throws std::invalid_argument for an
  // option out of the ranges listed under State.
  ShardedGradScaler(GradScalerOptions options, comm::Communicator* group);

  at::Tensor scale(const at::Tensor& loss) const;

  // Collective over the group (when enabled). Unscales the .grad of `params` in place
  // (undefined ones are skipped; fp16, bf16, fp32, fp64) and sets found_inf().
  void unscale(const std::vector<at::Tensor>& params);

  // Collective if unscale() was not called this step. Returns whether optimizer.step() ran.
  bool step(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params);

  void update();

  double current_scale() const;
  bool found_inf() const { return found_inf_; }  // of this step's unscale
  int64_t growth_tracker() const { return growth_tracker_; }
  const GradScalerOptions& options() const { return options_; }

  nlohmann::json state() const;
  // Also resets the step in progress (as if update() had just run).
  void load_state(const nlohmann::json& saved);

 private:
  enum class Stage { Ready, Unscaled, Stepped };  // GradScaler's OptState

  GradScalerOptions options_;
  comm::Communicator* group_;
  float scale_;
  int64_t growth_tracker_ = 0;
  bool found_inf_ = false;
  Stage stage_ = Stage::Ready;
};

}  // namespace fsdpp::optim
