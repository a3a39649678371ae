// Fuzz target: the --config file of `fsdpp train` (JSON or YAML).
//
// The input is written as config.json when its first non-blank byte is '{' or '[', else
// as config.yaml, and goes the way `fsdpp train --config FILE` takes it
// (harness/cli/main.cpp): TrainCommand::expand_config reads it with
// io::load_json_or_yaml_file (core/io/yaml_json.cpp) and turns every key into a flag;
// CLI11 parses the flags into the TrainConfig; TrainCommand::finish_config turns its
// string flags into enums, and TrainConfig::validate (core/train/train_config.cpp) checks
// it: what TrainCommand::run does before train::preflight reads model and data. No data is read
// and no rank is launched. The same text also goes through io::yaml_documents_to_json, the
// reader of `fsdpp data prepare`'s .yaml inputs.
//
// The libFuzzer build links only the sources it lists (CMakeLists.txt), so it adds
// train_link_seams.cpp for the functions train_command.cpp calls and this target never
// reaches; the main build's fuzz_brief links the real ones.
//
// Expected: a std::exception (CLI::ParseError included) naming the file or flag. Finding:
// anything else (crash, sanitizer report, non-std exception, hang, huge allocation).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/io/yaml_json.h"
#include "harness/cli/train_command.h"
#include "suites/fuzz/fuzz_support.h"

namespace {

bool looks_like_json(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && (text[first] == '{' || text[first] == '[');
}

// `fsdpp train --config FILE` as main() runs it, up to preflight.
void run_train_command(const std::string& config_file) {
  CLI::App app{"fsdpp"};
  app.require_subcommand(1);
  fsdpp::cli::TrainCommand train;
  train.add_to(app);
  std::vector<std::string> args = train.expand_config({"fsdpp", "train", "--config", config_file});
  std::vector<char*> arg_ptrs;
  for (auto& a : args) arg_ptrs.push_back(a.data());
  app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  train.finish_config().validate();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto path = fsdpp::fuzz::write_scratch(looks_like_json(text) ? "config.json" : "config.yaml", data, size);
  fsdpp::fuzz::reader_may_reject([&] { run_train_command(path.string()); });
  fsdpp::fuzz::reader_may_reject(
      [&] { (void)fsdpp::io::yaml_documents_to_json<nlohmann::ordered_json>(text, "input.yaml"); });
  return 0;
}
