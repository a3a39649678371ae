// Where the suites find the assets that ci/fetch_assets.sh fetches (tokenizers,
// tokenizer test vectors, corpora): $FSDPP_ASSETS_DIR, else <source>/.cache/assets.
#pragma once

#include <filesystem>
#include <string>

namespace fsdpp::harness {

// The asset at `relative` (a file or a folder). Throws std::runtime_error naming the path
// and the remedy when it is missing, so a test without its assets fails with that message.
std::filesystem::path test_asset(const std::string& relative);

}  // namespace fsdpp::harness
