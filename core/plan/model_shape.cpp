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

// While alive, this thread's tensor factories dispatch to the meta kernels. It saves the
// thread's whole local dispatch key set and puts it back as it was (also on an exception),
// rather than removing the key it added: a nested guard that snapshots the set while Meta
// is in it must not leave Meta behind.
class MetaFactories {
 public:
  MetaFactories() : saved_(c10::impl::tls_local_dispatch_key_set()) {
    c10::impl::PODLocalDispatchKeySet meta;
    meta.set_included(saved_.included_ | c10::DispatchKeySet(c10::DispatchKey::Meta));
    meta.set_excluded(saved_.excluded_);
    c10::impl::_force_tls_local_dispatch_key_set(c10::impl::LocalDispatchKeySet(meta));
  }
  ~MetaFactories() { c10::impl::_force_tls_local_dispatch_key_set(saved_); }
  MetaFactories(const MetaFactories&) = delete;
  MetaFactories& operator=(const MetaFactories&) = delete;

 private:
  c10::impl::LocalDispatchKeySet saved_;
};

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
  models::parse_causal_lm_config(config, source);  // the config as given must be valid
  // Rope scaling changes no parameter's shape, and Llama 3's scaled frequencies use an op
  // with no meta kernel (where): the shape is read off the unscaled model.
  nlohmann::json unscaled = config;
  unscaled.erase("rope_scaling");
  if (unscaled.contains("rope_parameters") && unscaled["rope_parameters"].is_object()) {
    nlohmann::json plain = {{"rope_type", "default"}};
    if (unscaled["rope_parameters"].contains("rope_theta"))
      plain["rope_theta"] = unscaled["rope_parameters"]["rope_theta"];
    unscaled["rope_parameters"] = plain;
  }
  auto parsed = models::parse_causal_lm_config(unscaled, source);
  ModelShape s;
  s.model_type = parsed.model_type;
  s.config = config;
  {
    // Every factory call below dispatches to the meta kernels: parameters get shapes and
    // dtypes but no storage, and initialisers (uniform_, normal_) do nothing.
    MetaFactories meta;
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
    // The family's own config.json names both, with defaults filled in.
    const int64_t experts = config_int(lm.config, {"num_local_experts"});
    if (experts > 0) s.expert_share = static_cast<double>(config_int(lm.config, {"num_experts_per_tok"})) / experts;
  }
  s.layers = config_int(config, {"n_layer", "num_hidden_layers"});
  s.hidden = config_int(config, {"n_embd", "hidden_size"});
  s.heads = config_int(config, {"n_head", "num_attention_heads"});
  const int64_t head_dim = config_int(config, {"head_dim"});
  s.attention_width = head_dim > 0 ? s.heads * head_dim : s.hidden;
  // GPT-2's n_inner may be null (4 * n_embd); OPT's ffn_dim; Llama's intermediate_size.
  s.ffn = config_int(config, {"n_inner", "ffn_dim", "intermediate_size"}, 4 * s.hidden);
  const bool post_norm = s.model_type == "opt" && !config.value("do_layer_norm_before", true);
  // A sparse block's last call is an expert's down projection, an ordinary call that its
  // recomputation repeats: nothing is skipped.
  s.skipped_projection_params = post_norm || s.expert_share < 1.0 ? 0 : s.ffn * s.hidden;
  return s;
}

}  // namespace fsdpp::plan
