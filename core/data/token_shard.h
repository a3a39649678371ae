// One fsdpp token shard (`.tok`): a versioned 64-byte header and the tokens of one or
// more documents. The byte layout is specified in TOKENS.md beside this file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

namespace fsdpp::data {

inline constexpr char kShardMagic[8] = {'F', 'S', 'D', 'P', 'P', 'T', 'O', 'K'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderBytes = 64;

// Width of the stored tokens (the header's dtype code).
enum class TokenDtype : uint32_t { kUint16 = 1, kUint32 = 2 };

int token_dtype_bytes(TokenDtype dtype);  // 2 or 4
const char* to_string(TokenDtype dtype);  // "uint16" / "uint32"
// uint16 if every id in [0, vocab_size) fits, else uint32.
TokenDtype token_dtype_for_vocab(int64_t vocab_size);

struct ShardHeader {
  TokenDtype dtype = TokenDtype::kUint16;
  int64_t token_count = 0;
  int64_t document_count = 0;
};

// Writes `tokens` as a shard at `path`, atomically (temporary file, fsync, rename).
// Throws std::invalid_argument naming the path if a token does not fit `dtype`.
void write_token_shard(const std::filesystem::path& path, const std::vector<int32_t>& tokens, int64_t document_count,
                       TokenDtype dtype);

// The header of a shard from its first bytes (`head`, at least 64 of them) and the file's
// size. Throws std::runtime_error naming `path` and the expectation for an unknown magic,
// a version other than 1, an unknown dtype, nonzero reserved bytes, or a size other than
// exactly header + tokens.
ShardHeader parse_shard_header(const std::filesystem::path& path, std::string_view head, uint64_t file_size);

// Reads and checks the header of the shard at `path` (as above; also unreadable files).
ShardHeader read_shard_header(const std::filesystem::path& path);

}  // namespace fsdpp::data
