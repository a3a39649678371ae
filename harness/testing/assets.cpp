#include "harness/testing/assets.h"

#include <cstdlib>
#include <stdexcept>

namespace fsdpp::harness {

std::filesystem::path test_asset(const std::string& relative) {
  const char* env = std::getenv("FSDPP_ASSETS_DIR");
  const auto root =
      env && *env ? std::filesystem::path(env) : std::filesystem::path(FSDPP_SOURCE_DIR) / ".cache" / "assets";
  auto path = root / relative;
  if (!std::filesystem::exists(path))
    throw std::runtime_error("missing asset " + path.string() +
                             ": run `bash ci/fetch_assets.sh` (or point FSDPP_ASSETS_DIR at its output)");
  return path;
}

}  // namespace fsdpp::harness
