#include "harness/equiv/equivalence.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "core/models/tiny_transformer.h"
#include "core/models/toy_mlp.h"
#include "core/nn/module_hooks.h"
#include "core/nn/unique_parameters.h"
#include "core/optim/grad_scaler.h"
#include "core/train/train_step.h"
#include "harness/oracle/tolerance.h"

namespace fsdpp::harness {

namespace {

at::Generator data_generator(int64_t step, int64_t index) {
  return at::detail::createCPUGenerator(static_cast<uint64_t>(1000003 * step + 7919 * index + 17));
}

TrainBatch concat_batches(const std::vector<TrainBatch>& parts) {
  std::vector<torch::Tensor> inputs, targets;
  for (const auto& p : parts) {
    inputs.push_back(p.input);
    targets.push_back(p.target);
  }
  return {torch::cat(inputs), torch::cat(targets)};
}

bool scalar_close(double actual, double expected, at::ScalarType dtype = at::kFloat) {
  auto tol = default_tolerance(dtype);
  return std::abs(actual - expected) <= tol.atol + tol.rtol * std::abs(expected);
}

torch::optim::AdamWOptions adamw_options(const EquivConfig& c) {
  return torch::optim::AdamWOptions(c.lr).betas({0.9, 0.999}).eps(c.adam_eps).weight_decay(c.weight_decay);
}

std::vector<int> compare_steps(const EquivConfig& c) {
  if (!c.compare_full_at.empty()) return c.compare_full_at;
  return c.steps > 1 ? std::vector<int>{0, c.steps - 1} : std::vector<int>{0};
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

using Named = std::map<std::string, torch::Tensor>;

struct RunTrace {
  std::vector<double> loss, grad_norm, loss_scale;
  std::vector<bool> stepped;
  std::map<int, Named> grads, params;
};

// GradScaler's dynamic scale, written out for the reference (torch.amp.GradScaler.update,
// _amp_update_scale_): an fp32 scale, * 0.5 on an overflow, * 2 after growth_interval
// clean steps in a row (kept only if finite).
struct ReferenceLossScale {
  float scale;
  int64_t growth_interval, clean_steps = 0;

  void update(bool found_inf) {
    if (found_inf) {
      scale *= 0.5f;
      clean_steps = 0;
    } else if (++clean_steps == growth_interval) {
      if (std::isfinite(scale * 2.0f)) scale *= 2.0f;
      clean_steps = 0;
    }
  }
};

// loss * scale in fp32 (or wider), returned in the loss's dtype, as GradScaler.scale.
torch::Tensor times_scale(const torch::Tensor& loss, float scale) {
  if (loss.scalar_type() == at::kDouble) return loss * static_cast<double>(scale);
  return (loss.to(at::kFloat) * scale).to(loss.scalar_type());
}

// Rank-ordered average of `parts`, as the communicator reduces: each part cast to
// `reduce`, summed in order (widened to fp32 for 16-bit dtypes), divided by the count,
// rounded once to `reduce`.
torch::Tensor communicator_average(const std::vector<torch::Tensor>& parts, at::ScalarType reduce) {
  torch::Tensor sum;
  for (const auto& g : parts) {
    auto r = g.to(reduce);
    if (!sum.defined())
      sum = reduce == at::kFloat || reduce == at::kDouble ? r.clone() : r.to(at::kFloat);
    else
      sum.add_(r);
  }
  sum.div_(static_cast<double>(parts.size()));
  return sum.to(reduce);
}

// What FSDP's reduction makes of the ranks' gradients (`per_rank[r]`, rank order): the
// average over each shard group of `shard_size` consecutive ranks, then (hybrid and
// NO_SHARD) the average of those over the replicas; widened to the fp32 masters.
torch::Tensor emulated_reduction(const std::vector<torch::Tensor>& per_rank, at::ScalarType reduce, int shard_size) {
  const int world = static_cast<int>(per_rank.size());
  std::vector<torch::Tensor> group_means;
  for (int first = 0; first < world; first += shard_size)
    group_means.push_back(
        communicator_average({per_rank.begin() + first, per_rank.begin() + first + shard_size}, reduce));
  auto mean = group_means.size() == 1 ? group_means.front() : communicator_average(group_means, reduce);
  return mean.to(at::kFloat);
}

int shard_group_size(const fsdp::FsdpOptions& o, int world) {
  switch (o.strategy) {
    case fsdp::ShardingStrategy::NoShard: return 1;
    case fsdp::ShardingStrategy::HybridShard:
    case fsdp::ShardingStrategy::HybridShardZero2:
      if (o.hybrid_shard_size > 0) return o.hybrid_shard_size;
      for (int s = world / 2; s >= 1; --s)
        if (world % s == 0) return s;
      return 1;
    default: return world;
  }
}

// The unsharded reference: plain LibTorch on one process. With a mixed-precision policy
// it emulates the same casts, as PyTorch's mixed-precision FSDP tests do: a copy of the
// model in param_dtype computes, the fp32 masters carry the optimizer.
TrainBatch on_device(TrainBatch b, at::Device device) {
  if (device.is_cpu()) return b;
  return TrainBatch{b.input.to(device), b.target.to(device)};
}

torch::Tensor on_cpu(const torch::Tensor& t) { return t.defined() ? t.detach().to(at::kCPU).clone() : t; }

RunTrace run_reference(const EquivModel& model, const EquivConfig& c, int world) {
  RunTrace trace;
  auto net = model.build(c.seed);
  net->to(c.device);
  auto named = nn::unique_named_parameters(*net);
  std::vector<torch::Tensor> params;
  for (auto& [n, p] : named) params.push_back(p);
  torch::optim::AdamW opt(params, adamw_options(c));
  const auto& mp = c.fsdp.mixed_precision;
  const bool cast = mp.param_dtype && *mp.param_dtype != at::kFloat;
  auto compute = net;
  if (cast) {
    compute = model.build(c.seed);
    compute->to(c.device);
    compute->to(*mp.param_dtype);
  }
  auto compute_named = nn::unique_named_parameters(*compute);
  const auto reduce = mp.reduce_dtype.value_or(mp.param_dtype.value_or(at::kFloat));
  auto checked = compare_steps(c);
  const auto& scaling = c.loss_scaling;
  ReferenceLossScale loss_scale{static_cast<float>(scaling.init_scale), scaling.growth_interval};
  for (int step = 0; step < c.steps; ++step) {
    const float scale = scaling.enabled ? loss_scale.scale : 1.0f;
    auto backward = [&](const torch::Tensor& loss) { (scaling.enabled ? times_scale(loss, scale) : loss).backward(); };
    opt.zero_grad();
    if (cast) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < named.size(); ++i) {
        compute_named[i].second.copy_(named[i].second);
        compute_named[i].second.mutable_grad() = torch::Tensor();
      }
    }
    double loss_value = 0;
    if (c.deterministic) {
      // Rank r's micro-batch on its own, then the reduction FSDP performs, step by step.
      std::vector<std::vector<torch::Tensor>> per_rank(named.size());
      for (int r = 0; r < world; ++r) {
        auto loss = model.loss(*compute, on_device(model.batch(step, r), c.device));
        loss_value += loss.item<double>() / world;
        backward(loss);
        for (size_t i = 0; i < named.size(); ++i) {
          auto& g = compute_named[i].second.mutable_grad();
          if (g.defined()) per_rank[i].push_back(g);
          g = torch::Tensor();
        }
      }
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < named.size(); ++i)
        if (static_cast<int>(per_rank[i].size()) == world)
          params[i].mutable_grad() = emulated_reduction(per_rank[i], reduce, shard_group_size(c.fsdp, world));
    } else {
      std::vector<TrainBatch> parts;
      parts.reserve(static_cast<size_t>(world) * c.grad_accum);
      for (int i = 0; i < world * c.grad_accum; ++i) parts.push_back(model.batch(step, i));
      auto loss = model.loss(*compute, on_device(model.concat(parts), c.device));
      loss_value = loss.item<double>();
      backward(loss);
      if (cast) {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < named.size(); ++i)
          if (compute_named[i].second.grad().defined())
            params[i].mutable_grad() = compute_named[i].second.grad().to(reduce).to(at::kFloat);
      }
    }
    bool found_inf = scaling.enabled && step == scaling.overflow_step;
    if (scaling.enabled) {
      torch::NoGradGuard no_grad;
      for (auto& p : params)
        if (p.grad().defined()) {
          found_inf = found_inf || !torch::isfinite(p.grad()).all().item<bool>();
          p.mutable_grad().mul_(1.0f / scale);
        }
    }
    if (contains(checked, step))
      for (auto& [n, p] : named) trace.grads[step][n] = on_cpu(p.grad());
    double max_norm = c.clip_max_norm > 0 ? c.clip_max_norm : std::numeric_limits<double>::infinity();
    double norm = torch::nn::utils::clip_grad_norm_(params, max_norm, c.norm_type);
    if (!found_inf) opt.step();
    if (scaling.enabled) loss_scale.update(found_inf);
    trace.loss.push_back(loss_value);
    trace.grad_norm.push_back(norm);
    trace.loss_scale.push_back(scale);
    trace.stepped.push_back(!found_inf);
    if (contains(checked, step))
      for (auto& [n, p] : named) trace.params[step][n] = on_cpu(p);
  }
  return trace;
}

// The oracle's points inside a sharded step: before the loss scaler inspects the gradients
// (an overflow injected there) and with the gradients clipping sees (recorded there).
struct OracleObserver final : train::StepObserver {
  std::function<void()> on_after_backward, on_before_clip;
  void after_backward() override { on_after_backward(); }
  void before_clip() override { on_before_clip(); }
};

// The sharded run on this rank, one train::TrainStep per step (the step `fsdpp train`
// runs): a micro-batch's loss is the model's mean loss, scaled by 1/grad_accum before
// backward; gradients are recorded after unscaling, before clipping.
RunTrace run_sharded(comm::Communicator& comm, const EquivModel& model, const EquivConfig& c) {
  RunTrace trace;
  auto net = model.build(c.seed);
  net->to(c.device);
  auto sharded = fsdp::ShardedModel::create(net, comm, c.fsdp, model.wrap);
  auto params = sharded->parameters();
  torch::optim::AdamW opt(params, adamw_options(c));
  const auto& scaling = c.loss_scaling;
  auto checked = compare_steps(c);
  const int n = comm.size();
  train::TrainStepOptions options;
  options.grad_accum_steps = c.grad_accum;  // rows and seq_len 1: model.loss is a mean already
  options.grad_clip = c.clip_max_norm;
  options.norm_type = c.norm_type;
  options.accumulate_without_sync = c.accumulate_without_sync;
  options.loss_scaling = scaling.enabled;
  options.init_loss_scale = scaling.init_scale;
  options.loss_scale_growth_interval = scaling.growth_interval;
  int step = 0;
  double scale_used = 1.0;  // the scale this step's loss was multiplied by
  train::TrainStep* running = nullptr;
  OracleObserver observer;
  observer.on_after_backward = [&] {
    if (running->scaler() == nullptr) return;
    scale_used = running->scaler()->current_scale();
    if (step == scaling.overflow_step && comm.rank() == scaling.overflow_rank) inject_overflow(params);
  };
  observer.on_before_clip = [&] {
    if (contains(checked, step))
      for (auto& [name, g] : sharded->gather_full_gradients()) trace.grads[step][name] = on_cpu(g);
  };
  train::TrainStep train_step(
      comm,
      [&](const train::MicroBatch& batch) {
        return model.loss(*net, TrainBatch{batch.inputs, batch.targets});
      },
      sharded.get(), opt, options, &observer);
  running = &train_step;
  for (step = 0; step < c.steps; ++step) {
    const auto done = train_step.run(c.lr, [&](int micro) {
      auto batch = on_device(model.batch(step, static_cast<int64_t>(micro) * n + comm.rank()), c.device);
      return train::MicroBatch{batch.input, batch.target};
    });
    trace.loss.push_back(done.loss);
    trace.grad_norm.push_back(done.grad_norm);
    trace.loss_scale.push_back(scale_used);
    trace.stepped.push_back(done.optimizer_stepped);
    if (contains(checked, step))
      for (auto& [name, p] : sharded->gather_full_parameters()) trace.params[step][name] = on_cpu(p);
  }
  return trace;
}

void compare_named(EquivReport& report, const char* kind, int step, const Named& ref, const Named& got, bool bitwise) {
  for (const auto& [name, expected] : ref) {
    auto it = got.find(name);
    if (it == got.end()) {
      report.problems.push_back(std::string(kind) + " '" + name + "' missing from the sharded run");
      continue;
    }
    const auto& actual = it->second;
    if (expected.defined() != actual.defined()) {
      report.problems.push_back(std::string(kind) + " '" + name + "' at step " + std::to_string(step) +
                                " is defined in " +
                                (expected.defined() ? "the reference only" : "the sharded run only"));
      continue;
    }
    if (!expected.defined()) continue;
    TensorRecord rec;
    rec.name = name;
    rec.kind = kind;
    rec.step = step;
    auto cmp = compare(actual.reshape(expected.sizes()), expected);
    rec.max_abs_error = cmp.max_abs_error;
    rec.max_rel_error = cmp.max_rel_error;
    rec.bitwise_equal = bitwise_equal(actual.reshape(expected.sizes()).contiguous(), expected.contiguous());
    rec.ok = bitwise ? rec.bitwise_equal : cmp.ok;
    report.tensors.push_back(rec);
  }
}

}  // namespace

EquivModel toy_mlp_case() {
  EquivModel m;
  m.name = "toy_mlp";
  m.build = [](uint64_t seed) -> std::shared_ptr<torch::nn::Module> {
    torch::manual_seed(seed);
    return models::ToyMlp().ptr();
  };
  m.loss = [](torch::nn::Module& net, const TrainBatch& b) {
    auto& mlp = dynamic_cast<models::ToyMlpImpl&>(net);
    return torch::mse_loss(nn::call_impl(mlp, b.input), b.target);
  };
  m.batch = [](int64_t step, int64_t index) {
    auto gen = data_generator(step, index);
    return TrainBatch{at::randn({4, models::kToyMlpInput}, gen, at::kFloat),
                      at::randn({4, models::kToyMlpOutput}, gen, at::kFloat)};
  };
  m.concat = concat_batches;
  m.wrap = fsdp::wrap_by_module_type({"fsdpp::models::ToyBlockImpl"});
  return m;
}

EquivModel tiny_transformer_case(const models::TinyTransformerConfig& config) {
  EquivModel m;
  m.name = "tiny_transformer";
  m.build = [config](uint64_t seed) -> std::shared_ptr<torch::nn::Module> {
    torch::manual_seed(seed);
    return models::TinyTransformer(config).ptr();
  };
  m.loss = [](torch::nn::Module& net, const TrainBatch& b) {
    auto& model = dynamic_cast<models::TinyTransformerImpl&>(net);
    return models::lm_loss(nn::call_impl(model, b.input), b.target);
  };
  m.batch = [config](int64_t step, int64_t index) {
    auto gen = data_generator(step, index);
    auto tokens = at::randint(0, config.vocab, {2, config.seq_len + 1}, gen, at::TensorOptions().dtype(at::kLong));
    return TrainBatch{tokens.narrow(1, 0, config.seq_len).contiguous(),
                      tokens.narrow(1, 1, config.seq_len).contiguous()};
  };
  m.concat = concat_batches;
  m.wrap = fsdp::wrap_by_module_type({"fsdpp::models::TinyBlockImpl"});
  return m;
}

EquivModel equiv_case(const std::string& name) {
  if (name == "toy_mlp") return toy_mlp_case();
  if (name == "tiny_transformer") return tiny_transformer_case();
  throw std::invalid_argument("unknown model '" + name + "': expected toy_mlp or tiny_transformer");
}

void inject_overflow(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params)
    if (p.grad().defined() && p.grad().numel() > 0) {
      p.grad().view({-1})[0].fill_(std::numeric_limits<float>::infinity());
      return;
    }
  throw std::logic_error("inject_overflow: this rank holds no gradient to overflow");
}

EquivReport run_equivalence(comm::Communicator& comm, const EquivModel& model, const EquivConfig& c) {
  if (c.deterministic && c.grad_accum != 1)
    throw std::invalid_argument(
        "equivalence: deterministic mode compares against N micro-batches; grad_accum must be 1");
  EquivReport report;
  report.model = model.name;
  report.strategy = fsdp::to_string(c.fsdp.strategy);
  report.world_size = comm.size();
  report.deterministic = c.deterministic;
  auto sharded = run_sharded(comm, model, c);
  RunTrace ref;
  if (comm.rank() == 0) ref = run_reference(model, c, comm.size());
  for (int step = 0; step < c.steps; ++step) {
    StepRecord s;
    s.step = step;
    s.loss = sharded.loss[step];
    s.grad_norm = sharded.grad_norm[step];
    s.loss_scale = sharded.loss_scale[step];
    s.stepped = sharded.stepped[step];
    if (comm.rank() == 0) {
      s.ref_loss = ref.loss[step];
      s.ref_grad_norm = ref.grad_norm[step];
      s.ref_loss_scale = ref.loss_scale[step];
      s.ref_stepped = ref.stepped[step];
      // Deterministic runs do the same arithmetic (bitwise); otherwise the compute dtype's
      // tolerance applies (fp32, or bf16/fp16 under a mixed-precision policy). The norm of
      // an overflowed gradient (a skipped step) is not compared: only one side holds the inf.
      const auto dtype = c.deterministic ? at::kFloat : c.fsdp.mixed_precision.param_dtype.value_or(at::kFloat);
      const bool norms_close = !s.stepped || scalar_close(s.grad_norm, s.ref_grad_norm, dtype);
      s.ok = scalar_close(s.loss, s.ref_loss, dtype) && norms_close && s.loss_scale == s.ref_loss_scale &&
             s.stepped == s.ref_stepped;
    }
    report.steps.push_back(s);
  }
  if (comm.rank() == 0)
    for (int step : compare_steps(c)) {
      // The injected inf is in the sharded run's gradient only; the parameters still compare.
      if (step != c.loss_scaling.overflow_step || !c.loss_scaling.enabled)
        compare_named(report, "grad", step, ref.grads[step], sharded.grads[step], c.deterministic);
      compare_named(report, "param", step, ref.params[step], sharded.params[step], c.deterministic);
    }
  return report;
}

bool EquivReport::ok() const {
  if (!problems.empty() || steps.empty()) return false;
  for (const auto& s : steps)
    if (!s.ok) return false;
  for (const auto& t : tensors)
    if (!t.ok) return false;
  return true;
}

std::string EquivReport::table() const {
  std::ostringstream os;
  char line[256];
  os << "equivalence: " << model << ", " << strategy << ", " << world_size << " ranks"
     << (deterministic ? ", deterministic (bitwise)" : ", fp32 tolerance rtol 1.3e-6 atol 1e-5") << "\n";
  std::snprintf(line, sizeof(line), "%4s %14s %14s %14s %14s %s\n", "step", "ref_loss", "loss", "ref_grad_norm",
                "grad_norm", "ok");
  os << line;
  for (const auto& s : steps) {
    std::snprintf(
        line, sizeof(line), "%4d %14.8f %14.8f %14.8f %14.8f %s%s\n", s.step, s.ref_loss, s.loss, s.ref_grad_norm,
        s.grad_norm, s.ok ? "yes" : "NO",
        s.stepped && s.ref_stepped ? "" : (s.stepped == s.ref_stepped ? " (skipped)" : " (skipped on one side)"));
    os << line;
  }
  double worst_abs = 0;
  int bad = 0, bitwise = 0;
  for (const auto& t : tensors) {
    worst_abs = std::max(worst_abs, t.max_abs_error);
    bad += !t.ok;
    bitwise += t.bitwise_equal;
    if (!t.ok) {
      std::snprintf(line, sizeof(line), "  MISMATCH %s %s@%d: max abs %.3g, max rel %.3g\n", t.kind.c_str(),
                    t.name.c_str(), t.step, t.max_abs_error, t.max_rel_error);
      os << line;
    }
  }
  for (const auto& p : problems) os << "  PROBLEM " << p << "\n";
  os << "tensors compared: " << tensors.size() << ", bitwise equal: " << bitwise << ", outside tolerance: " << bad
     << ", worst abs error: " << worst_abs << "\n";
  os << "equivalence: " << (ok() ? "PASS" : "FAIL") << "\n";
  return os.str();
}

nlohmann::json EquivReport::to_json() const {
  nlohmann::json steps_json = nlohmann::json::array(), tensors_json = nlohmann::json::array();
  for (const auto& s : steps)
    steps_json.push_back({{"step", s.step},
                          {"ref_loss", s.ref_loss},
                          {"loss", s.loss},
                          {"ref_grad_norm", s.ref_grad_norm},
                          {"grad_norm", s.grad_norm},
                          {"ok", s.ok}});
  for (const auto& t : tensors)
    tensors_json.push_back({{"name", t.name},
                            {"kind", t.kind},
                            {"step", t.step},
                            {"max_abs_error", t.max_abs_error},
                            {"max_rel_error", t.max_rel_error},
                            {"bitwise_equal", t.bitwise_equal},
                            {"ok", t.ok}});
  return {{"format", "fsdpp.equiv"},
          {"version", 1},
          {"model", model},
          {"strategy", strategy},
          {"world_size", world_size},
          {"deterministic", deterministic},
          {"ok", ok()},
          {"steps", steps_json},
          {"tensors", tensors_json},
          {"problems", problems}};
}

}  // namespace fsdpp::harness
