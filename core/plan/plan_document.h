// The "fsdpp.plan" document (version 1, spec: PLAN.md beside this file) and its text form
// for the terminal: one configuration's per-rank bytes, collective bytes and step time.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/plan/memory_model.h"
#include "core/plan/model_shape.h"
#include "core/plan/plan_config.h"
#include "core/plan/step_time_model.h"

namespace fsdpp::plan {

inline constexpr int kPlanVersion = 1;

struct Plan {
  std::string model;  // how the model was named: "llama 70B" or a folder
  ModelShape shape;
  PlanConfig config;
  MemoryEstimate memory;
  StepTimeEstimate time;
  bool fits = true;        // peak <= device memory (and host bytes <= host memory), when stated
  std::string fit_reason;  // "" when it fits or nothing was stated
};

// Estimates memory and time, and whether it fits the stated memory. Throws
// std::invalid_argument naming the flag for a configuration that cannot run.
Plan make_plan(const std::string& model, const ModelShape& shape, const PlanConfig& config);

// The `fsdpp train` flags of a configuration (multi-node: per node, torchrun-style).
std::string train_flags(const std::string& model_flags, const PlanConfig& config);

nlohmann::json plan_json(const Plan& plan);
// Reads a document written by plan_json: throws std::invalid_argument naming `source`
// for another format or a version other than kPlanVersion.
void check_plan_document(const nlohmann::json& doc, const std::string& source);
std::string plan_text(const Plan& plan);

// "1.23 GB" (decimal).
std::string format_bytes(double bytes);

}  // namespace fsdpp::plan
