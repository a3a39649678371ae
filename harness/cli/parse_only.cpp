#include "harness/cli/parse_only.h"

#include <string>

namespace fsdpp::cli {
namespace {

// CLI11 2.x names its existence validators by their descriptions (Validators.hpp); an
// inactive validator describes itself as "".
bool is_path_existence_check(const CLI::Validator& validator) {
  const std::string description = validator.get_description();
  return description == "FILE" || description == "DIR" || description == "PATH(existing)";
}

void list_flags_of(const CLI::App& app, const std::string& path, std::FILE* out) {
  if (!path.empty()) std::fprintf(out, "%s\n", path.c_str());
  for (const CLI::Option* option : app.get_options()) {
    if (option == app.get_help_ptr() || option == app.get_help_all_ptr()) continue;
    for (const std::string& name : option->get_lnames())
      std::fprintf(out, "%s --%s\n", path.empty() ? "fsdpp" : path.c_str(), name.c_str());
  }
  const std::string prefix = path.empty() ? "fsdpp" : path;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    list_flags_of(*sub, prefix + " " + sub->get_name(), out);
}

}  // namespace

void skip_path_checks(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    // Option exposes its validators by index only; get_validator(int) throws past the end.
    for (int i = 0;; ++i) {
      CLI::Validator* validator = nullptr;
      try {
        validator = option->get_validator(i);
      } catch (const CLI::OptionNotFound&) {
        break;
      }
      if (is_path_existence_check(*validator)) validator->active(false);
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) skip_path_checks(*sub);
}

void list_flags(const CLI::App& app, std::FILE* out) { list_flags_of(app, "", out); }

}  // namespace fsdpp::cli
