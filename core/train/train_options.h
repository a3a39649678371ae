// Every option of `fsdpp train`, declared once (torchtitan's JobConfig): its flag names, its
// help, the checks on its value, how its text sets a TrainConfig field and how that field is
// written back. The command line's flags and their --help (harness/cli/train_command.cpp),
// the --config file's keys, TrainConfig::to_json (the run record's `config`, the
// checkpoints' train state) and the docs check (`fsdpp train --help` against docs/cli.md)
// all come from this one table. A new option is its field in TrainConfig (type and
// default) and its entry in train_options.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/train/train_config.h"

namespace fsdpp::train {

struct TrainOption {
  enum class Kind {
    Switch,   // present: true ("--flag=false" in a --config file: false)
    Integer,  // a whole number
    Real,     // a number
    Text,     // any text, or one of `choices`
  };
  std::string names;  // CLI11's: "--lr,--max-lr"; the first is the option's name
  std::string help;
  Kind kind = Kind::Text;
  std::vector<std::string> choices;                // Text: the accepted values (empty: any)
  std::optional<std::pair<double, double>> range;  // Integer, Real: inclusive bounds
  std::string json_key;                            // to_json's key, where it is not key()
  // Sets the field from the value's text ("true"/"false" for a switch). Throws
  // std::invalid_argument naming the flag and what was expected.
  std::function<void(TrainConfig&, const std::string&)> read;
  // The field as to_json records it.
  std::function<nlohmann::json(const TrainConfig&)> write;

  std::string name() const;  // "--lr"
  std::string key() const;   // "lr": the --config file's key (the name without "--", '_' for '-')
};

// The table, in --help order.
const std::vector<TrainOption>& train_options();

// --no-reshard-after-forward's value: "0,2,-1" are unit indices in module order (negative
// from the end), "" none. Throws std::invalid_argument naming `flag` for anything else.
std::vector<int64_t> parse_unit_indices(const std::string& spec, const std::string& flag);

}  // namespace fsdpp::train
