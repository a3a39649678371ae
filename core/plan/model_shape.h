// A causal LM's shape as FSDP sees it: every parameter's name and shape, grouped into the
// units ShardedModel::create would make with one unit per transformer block (the
// auto-wrap policy `fsdpp train` and the benchmark use), plus the numbers the activation
// and FLOP counts need. Built from a config.json object on the meta device: no weights
// are allocated, so a 70B model's shape costs milliseconds.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace fsdpp::plan {

struct ParamShape {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// One FSDP unit: its parameters in the order its flat shard buffer lays them out.
struct UnitShape {
  std::string name;  // "root" for the root unit
  bool is_root = false;
  std::vector<ParamShape> params;
  int64_t numel() const;
};

// Plain data: its implicit members throw only what copying a json or a vector may
// (allocation), which tidy's exception-escape reads into the implicit noexcept move.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct ModelShape {
  std::string model_type;        // one of models::supported_model_types()
  nlohmann::json config;         // as parsed (config.json)
  std::vector<UnitShape> units;  // core/fsdp/unit_plan.h's order: blocks, then the root
  // Every parameter under every name (a tied weight under each of its names), in
  // named_parameters order: what the FLOP count reads.
  std::vector<ParamShape> named_parameters;
  int64_t layers = 0;
  int64_t hidden = 0;           // residual stream width
  int64_t attention_width = 0;  // heads * head_dim
  int64_t heads = 0;
  int64_t ffn = 0;  // MLP inner width
  // Mixture of experts: num_experts_per_tok / experts, the share of expert weights a token
  // runs (the FLOP count's active parameters); 1 without experts.
  double expert_share = 1.0;
  // Weight elements, per block, of the projection a checkpoint's recomputation skips: the
  // MLP's output projection (ffn x hidden; nn::call_summed in core/models), which is the
  // block's last module call in every family but post-norm OPT (0 there).
  int64_t skipped_projection_params = 0;
  int64_t vocab = 0;
  int64_t max_positions = 0;

  // Unique parameters (a tied weight once).
  int64_t parameter_count() const;
  // Builds the model of `config` on the meta device and reads its units. Throws
  // std::invalid_argument naming `source` for a config core's parser refuses.
  static ModelShape of_config(const nlohmann::json& config, const std::string& source);
};

}  // namespace fsdpp::plan
