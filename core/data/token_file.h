// A token file on disk, in either format TOKENS.md specifies: an fsdpp shard (`.tok`,
// magic "FSDPPTOK") or an llm.c / nanoGPT `.bin` file (a header of 256 little-endian
// int32: magic 20240520, version 1, token count; then that many uint16 tokens). Readers
// tell them apart by the magic, never by the file name, and reject anything else.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string_view>

namespace fsdpp::data {

inline constexpr int32_t kLlmcMagic = 20240520;
// Enough leading bytes to parse either header (llm.c's is the larger).
inline constexpr int64_t kTokenFileHeadBytes = 1024;

// Where a token file keeps its tokens: unsigned little-endian integers of
// `bytes_per_token` bytes, `token_count` of them, starting `data_offset` bytes in.
struct TokenFileLayout {
  int64_t data_offset = 0;
  int bytes_per_token = 2;
  int64_t token_count = 0;
};

// The layout of a token file from its first bytes (`head`: up to kTokenFileHeadBytes,
// fewer only if the file is shorter) and its size. Throws std::runtime_error naming
// `path` and the expectation: "not a token file" for an unknown magic (or a file too
// short for one), else what the format's header check found (TOKENS.md).
TokenFileLayout token_file_layout(const std::filesystem::path& path, std::string_view head, uint64_t file_size);

// All tokens of the file as a 1-D int64 tensor (through TokenDataset; a file without
// tokens is an error). Throws std::runtime_error as token_file_layout does.
at::Tensor read_token_file(const std::filesystem::path& path);

// Writes an llm.c `.bin` file (atomically). Tokens must fit in uint16.
void write_llmc_tokens(const std::filesystem::path& path, const at::Tensor& tokens);

}  // namespace fsdpp::data
