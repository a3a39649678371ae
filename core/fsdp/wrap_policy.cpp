#include "core/fsdp/wrap_policy.h"

#include <algorithm>

namespace fsdpp::fsdp {

WrapPolicy wrap_by_module_type(std::vector<std::string> type_names) {
  return [names = std::move(type_names)](const WrapCandidate& c) {
    return std::find(names.begin(), names.end(), c.module.name()) != names.end();
  };
}

WrapPolicy wrap_by_min_params(int64_t min_num_params) {
  return [min_num_params](const WrapCandidate& c) { return c.unwrapped_numel >= min_num_params; };
}

WrapPolicy wrap_by_predicate(std::function<bool(const WrapCandidate&)> predicate) { return predicate; }

WrapPolicy wrap_nothing() {
  return [](const WrapCandidate&) { return false; };
}

}  // namespace fsdpp::fsdp
