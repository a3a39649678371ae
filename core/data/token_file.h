// Token files fsdpp reads for evaluation and training. Today: llm.c / nanoGPT `.bin`
// files (a header of 256 little-endian int32: magic 20240520, version 1, token count; then
// that many uint16 tokens). fsdpp's own versioned shard format joins with the data
// pipeline; readers detect the format by its magic and reject anything else.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>

namespace fsdpp::data {

inline constexpr int32_t kLlmcMagic = 20240520;

// All tokens of the file as a 1-D int64 tensor. Throws std::runtime_error naming the file
// and what was expected (magic, version, size that matches the token count).
at::Tensor read_token_file(const std::filesystem::path& path);

// Writes an llm.c `.bin` file (atomically). Tokens must fit in uint16.
void write_llmc_tokens(const std::filesystem::path& path, const at::Tensor& tokens);

}  // namespace fsdpp::data
