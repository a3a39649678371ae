#include "core/optim/grad_scaler.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>

namespace fsdpp::optim {

namespace {

using Json = nlohmann::json;

std::string num(double v) {
  Json j = v;  // shortest round-trip form, unlike std::to_string's fixed 6 digits
  return j.dump();
}

void check_options(const GradScalerOptions& o, const std::string& where) {
  if (!(o.growth_factor > 1.0) || !std::isfinite(o.growth_factor))
    throw std::invalid_argument(where + ": growth_factor " + num(o.growth_factor) + " (expected a finite number > 1)");
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0))
    throw std::invalid_argument(where + ": backoff_factor " + num(o.backoff_factor) + " (expected a number in (0, 1))");
  if (o.growth_interval < 1)
    throw std::invalid_argument(where + ": growth_interval " + std::to_string(o.growth_interval) +
                                " (expected an integer >= 1)");
}

// The scale as the fp32 value it is stored as; rejects what fp32 cannot hold.
float fp32_scale(double scale, const std::string& where, const char* name) {
  const float f = static_cast<float>(scale);
  if (!(scale > 0.0) || !std::isfinite(f) || f == 0.0f)
    throw std::invalid_argument(where + ": " + name + " " + num(scale) +
                                " (expected a positive number representable in fp32)");
  return f;
}

const Json& field(const Json& j, const char* name, Json::value_t type, const std::string& where) {
  if (!j.contains(name)) throw std::invalid_argument(where + ": missing key '" + name + "'");
  const Json& v = j.at(name);
  const bool ok = v.type() == type || (type == Json::value_t::number_integer && v.is_number_unsigned()) ||
                  (type == Json::value_t::number_float && v.is_number());
  if (!ok)
    throw std::invalid_argument(where + ": key '" + name + "' is a " + v.type_name() + " (expected a " +
                                Json(type).type_name() + ")");
  return v;
}

}  // namespace

ShardedGradScaler::ShardedGradScaler(GradScalerOptions options, comm::Communicator* group)
    : options_(options), group_(group) {
  check_options(options_, "grad scaler");
  scale_ = fp32_scale(options_.init_scale, "grad scaler", "init_scale");
}

at::Tensor ShardedGradScaler::scale(const at::Tensor& loss) const {
  if (!options_.enabled) return loss;
  // PyTorch multiplies by its fp32 scale tensor, then casts back to the loss's dtype.
  const auto compute = at::promote_types(loss.scalar_type(), at::kFloat);
  return loss.to(compute).mul(at::scalar_tensor(scale_, at::TensorOptions().dtype(compute))).to(loss.scalar_type());
}

void ShardedGradScaler::unscale(const std::vector<at::Tensor>& params) {
  if (!options_.enabled) return;
  if (stage_ == Stage::Unscaled)
    throw std::logic_error("grad scaler: unscale() was already called since the last update()");
  if (stage_ == Stage::Stepped)
    throw std::logic_error("grad scaler: unscale() called after step(); call update() first");

  // As GradScaler.unscale_: the reciprocal in double, rounded once to fp32.
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  // Whether every gradient is finite, gathered on their device: the host reads only the
  // all-reduced flag below, once.
  at::Tensor all_finite;
  for (const auto& p : params) {
    const auto& g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (g.is_sparse()) throw std::invalid_argument("grad scaler: sparse gradients are not supported");
    // Checked on the scaled values, before multiplying (as the fused kernel does).
    auto finite = at::isfinite(g).all();
    all_finite = all_finite.defined() ? at::logical_and(all_finite, finite.to(all_finite.device())) : finite;
    if (inv_scale == 1.0f) continue;  // the kernel leaves values untouched then
    if (g.scalar_type() == at::kHalf || g.scalar_type() == at::kBFloat16) {
      // In fp32 (the kernel's opmath type): mul_ on fp16 would cast 1/scale to fp16 first,
      // which loses it (2^-30 is 0 in fp16).
      g.copy_(g.to(at::kFloat).mul_(inv_scale));
    } else {
      g.mul_(static_cast<double>(inv_scale));  // the fp32 reciprocal, exact in fp32 and fp64
    }
  }

  // ShardedGradScaler all-reduces its found_inf so that every rank skips together.
  auto flag =
      all_finite.defined() ? at::logical_not(all_finite).to(at::kFloat).reshape({1}) : at::zeros({1}, at::kFloat);
  if (group_ != nullptr) group_->all_reduce(flag, comm::ReduceOp::Max);
  found_inf_ = flag.item<float>() > 0.0f;
  stage_ = Stage::Unscaled;
}

bool ShardedGradScaler::step(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (stage_ == Stage::Stepped)
    throw std::logic_error("grad scaler: step() was already called since the last update()");
  if (stage_ == Stage::Ready) unscale(params);
  stage_ = Stage::Stepped;
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void ShardedGradScaler::update() {
  if (!options_.enabled) return;
  if (stage_ == Stage::Ready)
    throw std::logic_error("grad scaler: update() without an inf check: call unscale() or step() first");
  // _amp_update_scale_: fp32 arithmetic on the scale; a growth to inf is dropped.
  if (found_inf_) {
    scale_ = scale_ * static_cast<float>(options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval) {
    const float grown = scale_ * static_cast<float>(options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    ++growth_tracker_;
  }
  found_inf_ = false;
  stage_ = Stage::Ready;
}

double ShardedGradScaler::current_scale() const { return options_.enabled ? static_cast<double>(scale_) : 1.0; }

nlohmann::json ShardedGradScaler::state() const {
  return {{"format", kGradScalerFormat},
          {"version", kGradScalerVersion},
          {"enabled", options_.enabled},
          {"scale", static_cast<double>(scale_)},
          {"growth_tracker", growth_tracker_},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", options_.growth_interval}};
}

void ShardedGradScaler::load_state(const nlohmann::json& saved) {
  using T = Json::value_t;
  const std::string where = "grad scaler state";
  if (!saved.is_object())
    throw std::invalid_argument(where + ": expected an object, got " + std::string(saved.type_name()));
  static const std::set<std::string> known = {"format",         "version",       "enabled",        "scale",
                                              "growth_tracker", "growth_factor", "backoff_factor", "growth_interval"};
  for (const auto& item : saved.items())
    if (!known.count(item.key())) throw std::invalid_argument(where + ": unknown key '" + item.key() + "'");
  const auto format = field(saved, "format", T::string, where).get<std::string>();
  if (format != kGradScalerFormat)
    throw std::invalid_argument(where + ": format '" + format + "' (expected '" + kGradScalerFormat + "')");
  const auto version = field(saved, "version", T::number_integer, where).get<int64_t>();
  if (version != kGradScalerVersion)
    throw std::invalid_argument(where + ": version " + std::to_string(version) + " is not supported (expected " +
                                std::to_string(kGradScalerVersion) + ")");

  GradScalerOptions loaded;
  loaded.enabled = field(saved, "enabled", T::boolean, where).get<bool>();
  loaded.growth_factor = field(saved, "growth_factor", T::number_float, where).get<double>();
  loaded.backoff_factor = field(saved, "backoff_factor", T::number_float, where).get<double>();
  loaded.growth_interval = field(saved, "growth_interval", T::number_integer, where).get<int64_t>();
  loaded.init_scale = options_.init_scale;
  check_options(loaded, where);
  const double scale = field(saved, "scale", T::number_float, where).get<double>();
  const float scale_f32 = fp32_scale(scale, where, "scale");
  if (static_cast<double>(scale_f32) != scale)
    throw std::invalid_argument(where + ": scale " + num(scale) + " is not an fp32 value (state() writes one)");
  const auto tracker = field(saved, "growth_tracker", T::number_integer, where).get<int64_t>();
  if (tracker < 0 || tracker >= loaded.growth_interval)
    throw std::invalid_argument(where + ": growth_tracker " + std::to_string(tracker) +
                                " (expected an integer in [0, " + std::to_string(loaded.growth_interval) + "))");
  // As GradScaler.load_state_dict: a disabled scaler's state cannot resume scaling.
  if (options_.enabled && !loaded.enabled)
    throw std::invalid_argument(where + ": saved from a disabled scaler (enabled=false); this scaler is enabled");

  if (!options_.enabled) return;  // pass-through: nothing to resume
  options_ = loaded;
  scale_ = scale_f32;
  growth_tracker_ = tracker;
  found_inf_ = false;
  stage_ = Stage::Ready;
}

}  // namespace fsdpp::optim
