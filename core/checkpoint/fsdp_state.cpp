#include "core/checkpoint/fsdp_state.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <set>
#include <stdexcept>
#include <unordered_set>

#include "core/compat/torch_compat.h"

namespace fsdpp::checkpoint {
namespace {

using torch::optim::AdamWParamState;

const char* const kStateTensors[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};

std::string model_name(const std::string& param) { return "model/" + param; }
std::string optim_name(const std::string& param, const std::string& key) { return "optim/" + param + "/" + key; }

// Where this rank's shard of one parameter sits in the full tensor.
struct Place {
  fsdp::FsdpParam* param;
  int64_t first_row;  // of the shard
  int64_t rows;       // of the shard
  int replica;        // this rank's index among the replicas holding the same rows
  int replicas;
};

std::vector<Place> places(fsdp::ShardedModel& model) {
  std::vector<Place> out;
  for (const auto& unit : model.units()) {
    const auto& comms = unit->comms();
    const int shard_rank = comms.shard ? comms.shard->rank() : 0;
    const int replicas = comms.replicate ? comms.replicate->size() : 1;
    const int replica = comms.replicate ? comms.replicate->rank() : 0;
    for (auto& p : unit->params())
      // A rank holding only padding starts past the last row: its empty range sits at the end.
      out.push_back({&p, std::min(p.layout().dim0, p.layout().first_row(shard_rank)), p.layout().valid_rows(shard_rank),
                     replica, replicas});
  }
  return out;
}

// Rows [begin, end) of a shard (relative to the shard) of a parameter of `shape`, as a
// CheckpointTensor's rows: [rows, ...] or, for a 0-d parameter, 0-d / empty.
at::Tensor shard_rows(const at::Tensor& shard, const std::vector<int64_t>& shape, int64_t shard_rows_total,
                      int64_t begin, int64_t end) {
  int64_t row_numel = 1;
  for (size_t i = 1; i < shape.size(); ++i) row_numel *= shape[i];
  at::Tensor rows = shard.detach().reshape({shard_rows_total, row_numel}).narrow(0, begin, end - begin);
  if (shape.empty()) return end - begin == 1 ? rows.reshape({}) : rows.reshape({0});
  return rows.reshape(piece_shape(shape, end - begin));
}

bool has_amsgrad(const torch::optim::AdamW& optimizer, const at::Tensor& param) {
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      if (p.is_same(param)) return static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad();
  return false;
}

}  // namespace

CheckpointContent sharded_state(fsdp::ShardedModel& model, const torch::optim::AdamW* optimizer) {
  CheckpointContent content;
  const int shard_size = model.shard_group_size();
  const auto& first_unit = model.units().front();
  const int replicas = first_unit->comms().replicate ? first_unit->comms().replicate->size() : 1;
  content.mesh = {fsdp::to_string(model.options().strategy), shard_size, replicas};
  nlohmann::json steps = nlohmann::json::object();
  for (const Place& place : places(model)) {
    const fsdp::FsdpParam& p = *place.param;
    // Replicas hold the same rows: replica j writes the j-th of `replicas` equal parts.
    const int64_t part = (place.rows + place.replicas - 1) / place.replicas;
    const int64_t begin = std::min(place.rows, part * place.replica), end = std::min(place.rows, begin + part);
    auto add = [&](const std::string& name, const at::Tensor& shard) {
      content.tensors.push_back({name, p.shape(), shard.scalar_type(), place.first_row + begin,
                                 shard_rows(shard, p.shape(), place.rows, begin, end)});
    };
    add(model_name(p.name()), p.sharded());
    if (optimizer == nullptr) continue;
    const auto& states = optimizer->state();
    auto it = states.find(compat::optimizer_state_key(states, p.sharded()));
    if (it == states.end()) continue;
    const auto& s = static_cast<const AdamWParamState&>(*it->second);
    add(optim_name(p.name(), "exp_avg"), s.exp_avg());
    add(optim_name(p.name(), "exp_avg_sq"), s.exp_avg_sq());
    if (s.max_exp_avg_sq().defined()) add(optim_name(p.name(), "max_exp_avg_sq"), s.max_exp_avg_sq());
    steps[p.name()] = s.step();
  }
  if (optimizer != nullptr) content.optimizer = {{"type", "adamw"}, {"step", steps}};
  return content;
}

void restore_sharded_state(const CheckpointReader& reader, fsdp::ShardedModel& model, torch::optim::AdamW* optimizer) {
  auto fail = [&](const std::string& problem) -> void {
    throw std::runtime_error("checkpoint " + reader.dir().string() + ": " + problem);
  };
  for (const auto& unit : model.units())
    if (!unit->replicated() && (unit->state() == fsdp::FsdpUnit::State::Unsharded || unit->unshard_in_flight()))
      fail("cannot restore while unit '" + unit->name() + "' is unsharded: restore between steps");

  // 1. Everything checked before anything changes.
  const auto all = places(model);
  std::unordered_set<const c10::TensorImpl*> optimized;  // the shards the optimizer steps
  if (optimizer != nullptr)
    for (const auto& group : optimizer->param_groups())
      for (const auto& t : group.params()) optimized.insert(t.unsafeGetTensorImpl());
  std::set<std::string> params, stepped;  // stepped: the parameters whose shard the optimizer steps
  for (const Place& place : all) {
    const fsdp::FsdpParam& p = *place.param;
    params.insert(p.name());
    if (optimized.count(p.sharded().unsafeGetTensorImpl())) stepped.insert(p.name());
    if (!reader.contains(model_name(p.name())))
      fail("model has '" + p.name() + "' " + shape_string(p.shape()) + ", checkpoint has no '" + model_name(p.name()) +
           "'");
    const TensorEntry& entry = reader.tensor(model_name(p.name()));
    if (entry.shape != p.shape())
      fail("model has '" + p.name() + "' of shape " + shape_string(p.shape()) + ", checkpoint has " +
           shape_string(entry.shape));
    if (entry.dtype != p.sharded().scalar_type())
      fail("model has '" + p.name() + "' as " + dtype_name(p.sharded().scalar_type()) + ", checkpoint has " +
           dtype_name(entry.dtype));
  }
  const nlohmann::json& optim = reader.index().optimizer;
  for (const auto& [name, entry] : reader.index().tensors) {
    if (name.rfind("model/", 0) == 0) {
      if (!params.count(name.substr(6))) fail("has '" + name + "', which the model does not have");
    } else if (name.rfind("optim/", 0) == 0) {
      const auto slash = name.rfind('/');
      const std::string param = name.substr(6, slash - 6), key = name.substr(slash + 1);
      if (slash < 6 || !params.count(param)) fail("has '" + name + "', state of a parameter the model does not have");
      if (optimizer != nullptr && !stepped.count(param))
        fail("has '" + name + "', AdamW state of '" + param + "', which the optimizer restored into does not step");
      if (key != "exp_avg" && key != "exp_avg_sq" && key != "max_exp_avg_sq")
        fail("has '" + name + "', which is not AdamW state (exp_avg, exp_avg_sq, max_exp_avg_sq)");
      if (entry.shape != reader.tensor(model_name(param)).shape)
        fail("'" + name + "' has shape " + shape_string(entry.shape) + ", its parameter " +
             shape_string(reader.tensor(model_name(param)).shape));
      if (optim.value("type", "") != "adamw") fail("holds optimizer state, but its optimizer is not 'adamw'");
      if (!optim.contains("step") || !optim["step"].is_object() || !optim["step"].contains(param) ||
          !optim["step"][param].is_number_integer())
        fail("holds AdamW state of '" + param + "' but no integer optimizer.step for it");
      for (const char* required : {"exp_avg", "exp_avg_sq"})
        if (!reader.contains(optim_name(param, required)))
          fail("holds '" + name + "' but not '" + optim_name(param, required) + "'");
    }
  }

  // 2. Parameters, then optimizer state, each rank its own rows.
  at::NoGradGuard no_grad;
  for (const Place& place : all) {
    fsdp::FsdpParam& p = *place.param;
    reader.read_rows(model_name(p.name()), place.first_row, p.sharded().detach());
  }
  if (optimizer == nullptr) return;
  auto& states = optimizer->state();
  for (const Place& place : all) {
    fsdp::FsdpParam& p = *place.param;
    const at::Tensor& shard = p.sharded();
    if (!optimized.count(shard.unsafeGetTensorImpl())) continue;
    const auto key = compat::optimizer_state_key(states, shard);
    if (!reader.contains(optim_name(p.name(), "exp_avg"))) {
      states.erase(key);  // the checkpoint's optimizer never stepped this parameter
      continue;
    }
    auto state = std::make_unique<AdamWParamState>();
    state->step(optim["step"][p.name()].get<int64_t>());
    for (const char* tensor_key : kStateTensors) {
      const std::string name = optim_name(p.name(), tensor_key);
      if (!reader.contains(name)) continue;
      at::Tensor value = at::empty_like(shard, at::MemoryFormat::Contiguous);
      reader.read_rows(name, place.first_row, value);
      if (std::string(tensor_key) == "exp_avg") state->exp_avg(value);
      if (std::string(tensor_key) == "exp_avg_sq") state->exp_avg_sq(value);
      if (std::string(tensor_key) == "max_exp_avg_sq") state->max_exp_avg_sq(value);
    }
    if (!state->max_exp_avg_sq().defined() && has_amsgrad(*optimizer, shard))
      state->max_exp_avg_sq(at::zeros_like(shard, at::MemoryFormat::Contiguous));
    states[key] = std::move(state);
  }
}

}  // namespace fsdpp::checkpoint
