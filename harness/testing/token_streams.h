// Token data that suites train on.
#pragma once

#include <cstdint>
#include <filesystem>

namespace fsdpp::harness {

// A learnable stream of `count` tokens below `vocab`, written as an llm.c .bin file to
// <dir>/tokens.bin (returned): each token mostly follows from the previous one
// (t' = 5t + 3 + noise in {0, 1, 2}, mod vocab), so the loss visibly falls within a few
// steps where random tokens would leave it flat. The same tokens on every call.
std::filesystem::path write_markov_tokens(const std::filesystem::path& dir, int64_t count, int64_t vocab);

}  // namespace fsdpp::harness
