#include "core/plan/model_shape.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include "core/fsdp/unit_plan.h"
#include "core/models/causal_lm.h"

namespace fsdpp::plan {

namespace {

int64_t config_int(const nlohmann::json& c, std::initializer_list<const char*> keys, int64_t fallback = 0) {
  for (const char* k : keys)
    if (c.contains(k) && c[k].is_number_integer()) return c[k].get<int64_t>();
  return fallback;
}

std::vector<int64_t> shape_of(const at::Tensor& t) { return std::vector<int64_t>(t.sizes().begin(), t.sizes().end()); }

}  // namespace

int64_t ParamShape::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t UnitShape::numel() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int64_t ModelShape::parameter_count() const {
  int64_t n = 0;
  for (const auto& u : units) n += u.numel();
  return n;
}

ModelShape ModelShape::of_config(const nlohmann::json& config, const std::string& source) {
  auto parsed = models::parse_causal_lm_config(config, source);
  ModelShape s;
  s.model_type = parsed.model_type;
  s.config = config;
  {
    // Every factory call below dispatches to the meta kernels: parameters get shapes and
    // dtypes but no storage, and initialisers (uniform_, normal_) do nothing.
    c10::impl::IncludeDispatchKeyGuard meta(c10::DispatchKey::Meta);
    models::CausalLm lm = parsed.build();
    for (const auto& item : lm.module->named_parameters(/*recurse=*/true))
      s.named_parameters.push_back({item.key(), shape_of(item.value())});
    for (auto& plan : fsdp::plan_units(*lm.module, fsdp::wrap_by_module_type({lm.block_type}))) {
      UnitShape unit{plan.is_root ? "root" : plan.name, plan.is_root, {}};
      for (const auto& [name, tensor] : plan.params) unit.params.push_back({name, shape_of(tensor)});
      s.units.push_back(std::move(unit));
    }
    s.vocab = lm.vocab_size;
    s.max_positions = lm.max_positions;
  }
  s.layers = config_int(config, {"n_layer", "num_hidden_layers"});
  s.hidden = config_int(config, {"n_embd", "hidden_size"});
  s.heads = config_int(config, {"n_head", "num_attention_heads"});
  const int64_t head_dim = config_int(config, {"head_dim"});
  s.attention_width = head_dim > 0 ? s.heads * head_dim : s.hidden;
  // GPT-2's n_inner may be null (4 * n_embd); OPT's ffn_dim; Llama's intermediate_size.
  s.ffn = config_int(config, {"n_inner", "ffn_dim", "intermediate_size"}, 4 * s.hidden);
  return s;
}

}  // namespace fsdpp::plan
