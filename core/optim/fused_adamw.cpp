#include "core/optim/fused_adamw.h"

#include <map>
#include <tuple>
#include <vector>

#include "core/compat/torch_compat.h"
#include "core/optim/adamw_kernel.h"
#include "core/runtime/threads.h"

namespace fsdpp::optim {

namespace {

enum class Route { Cuda, Host, None };

bool dense_like(const at::Tensor& t, const at::Tensor& p) {
  return t.defined() && t.layout() == at::kStrided && t.is_contiguous() && t.device() == p.device() &&
         t.scalar_type() == p.scalar_type();
}

// Where this parameter's step can run; `state` is its AdamW state, null before its first step.
Route route_of(const at::Tensor& p, const torch::optim::AdamWOptions& o, const torch::optim::AdamWParamState* state) {
  if (o.amsgrad() || !dense_like(p, p) || !dense_like(p.grad(), p)) return Route::None;
  if (state != nullptr && !(dense_like(state->exp_avg(), p) && dense_like(state->exp_avg_sq(), p))) return Route::None;
#if FSDPP_HAS_FUSED_ADAMW
  if (p.is_cuda() && at::isFloatingType(p.scalar_type())) return Route::Cuda;
#endif
  if (p.device().is_cpu() && p.scalar_type() == at::kFloat) return Route::Host;
  return Route::None;
}

// The tensors of one _fused_adamw_ call: one device, dtype and step count (the kernel reads
// the step from a tensor; a list may repeat one).
struct CudaBucket {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
};

struct HostTensor {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t numel;
  AdamWStepConstants constants;
};

// 128 KiB of each of the four arrays: a piece's working set stays in L2. Elementwise, so
// neither the pieces nor the threads that run them can change a bit.
constexpr int64_t kHostPieceNumel = 32768;

// Pieces split evenly over the rank's intra-op threads (runtime::parallel_chunks: the
// tensors are stepped in parallel, not one thread after another).
void step_host(const std::vector<HostTensor>& tensors) {
  struct Piece {
    const HostTensor* tensor;
    int64_t begin, end;
  };
  std::vector<Piece> pieces;
  for (const auto& t : tensors)
    for (int64_t begin = 0; begin < t.numel; begin += kHostPieceNumel)
      pieces.push_back({&t, begin, std::min(t.numel, begin + kHostPieceNumel)});
  // Below ~64 pieces (2 M values) a thread costs more than it saves.
  runtime::parallel_chunks(static_cast<int64_t>(pieces.size()), 64, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const auto& [t, begin, end] = pieces[i];
      adamw_step_range(t->param + begin, t->grad + begin, t->exp_avg + begin, t->exp_avg_sq + begin, end - begin,
                       t->constants);
    }
  });
}

}  // namespace

bool fused_adamw_available() { return FSDPP_HAS_FUSED_ADAMW; }

torch::Tensor FusedAdamW::step(LossClosure closure) {
  bool any_cuda = false, any_host = false;
  for (const auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto it = state_.find(compat::optimizer_state_key(state_, p));
      const auto* state =
          it == state_.end() ? nullptr : static_cast<const torch::optim::AdamWParamState*>(it->second.get());
      switch (route_of(p, o, state)) {
        case Route::Cuda: any_cuda = true; break;
        case Route::Host: any_host = true; break;
        case Route::None: last_step_kernels_ = "per-tensor"; return torch::optim::AdamW::step(std::move(closure));
      }
    }
  }
  last_step_kernels_ = any_cuda && any_host ? "fused+fused-cpu"
                       : any_cuda           ? "fused"
                       : any_host           ? "fused-cpu"
                                            : "per-tensor";

  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  std::vector<HostTensor> host;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const auto [beta1, beta2] = o.betas();
    std::map<std::tuple<at::Device::Type, int, at::ScalarType, int64_t>, CudaBucket> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      // The state the per-tensor step would create, under its key.
      auto& slot = state_[compat::optimizer_state_key(state_, p)];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
      state.step(state.step() + 1);
      if (p.is_cuda()) {
        auto& b = buckets[{p.device().type(), p.device().index(), p.scalar_type(), state.step()}];
        b.params.push_back(p);
        b.grads.push_back(p.grad());
        b.exp_avgs.push_back(state.exp_avg());
        b.exp_avg_sqs.push_back(state.exp_avg_sq());
      } else {
        host.push_back({p.data_ptr<float>(), p.grad().data_ptr<float>(), state.exp_avg().data_ptr<float>(),
                        state.exp_avg_sq().data_ptr<float>(), p.numel(),
                        adamw_step_constants(o.lr(), beta1, beta2, o.eps(), o.weight_decay(), state.step())});
      }
    }
#if FSDPP_HAS_FUSED_ADAMW
    for (auto& [key, b] : buckets) {
      const auto& p0 = b.params.front();
      auto step = at::full({}, static_cast<double>(std::get<3>(key)), p0.options().dtype(at::kFloat));
      std::vector<at::Tensor> steps(b.params.size(), step);
      at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(), beta1,
                        beta2, o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false);
    }
#endif
  }
  step_host(host);
  return loss;
}

}  // namespace fsdpp::optim
