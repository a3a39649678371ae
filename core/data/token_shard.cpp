#include "core/data/token_shard.h"

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "core/io/atomic_file.h"

// The header fields are encoded byte by byte; the token payload is copied as is, which is
// little-endian only on a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are little-endian");

namespace fsdpp::data {
namespace {

template <class T>
T load_le(std::string_view bytes, size_t offset) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}

template <class T>
void store_le(std::string& bytes, size_t offset, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) bytes[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

[[noreturn]] void reject(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error(path.string() + ": " + what);
}

template <class T>
void append_tokens(std::string& bytes, const std::vector<int32_t>& tokens) {
  size_t at = bytes.size();
  bytes.resize(at + tokens.size() * sizeof(T));
  for (int32_t t : tokens) {
    const T v = static_cast<T>(t);
    std::memcpy(&bytes[at], &v, sizeof(T));
    at += sizeof(T);
  }
}

}  // namespace

int token_dtype_bytes(TokenDtype dtype) { return dtype == TokenDtype::kUint16 ? 2 : 4; }

const char* to_string(TokenDtype dtype) { return dtype == TokenDtype::kUint16 ? "uint16" : "uint32"; }

TokenDtype token_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenDtype::kUint16 : TokenDtype::kUint32;
}

void write_token_shard(const std::filesystem::path& path, const std::vector<int32_t>& tokens, int64_t document_count,
                       TokenDtype dtype) {
  const int64_t max_id = dtype == TokenDtype::kUint16 ? 65535 : int64_t{0xffffffff};
  for (int32_t t : tokens)
    if (t < 0 || t > max_id)
      throw std::invalid_argument(path.string() + ": token " + std::to_string(t) + " does not fit the shard's " +
                                  to_string(dtype) + " tokens (expected 0.." + std::to_string(max_id) + ")");
  std::string bytes(kShardHeaderBytes, '\0');
  std::memcpy(bytes.data(), kShardMagic, sizeof(kShardMagic));
  store_le<uint32_t>(bytes, 8, kShardVersion);
  store_le<uint32_t>(bytes, 12, static_cast<uint32_t>(dtype));
  store_le<uint64_t>(bytes, 16, tokens.size());
  store_le<uint64_t>(bytes, 24, static_cast<uint64_t>(document_count));
  if (dtype == TokenDtype::kUint16)
    append_tokens<uint16_t>(bytes, tokens);
  else
    append_tokens<uint32_t>(bytes, tokens);
  io::write_file_atomic(path, bytes);
}

ShardHeader parse_shard_header(const std::filesystem::path& path, std::string_view head, uint64_t file_size) {
  if (head.size() < static_cast<size_t>(kShardHeaderBytes) || file_size < static_cast<uint64_t>(kShardHeaderBytes))
    reject(path, "truncated fsdpp token shard (expected a 64-byte header, the file has " + std::to_string(file_size) +
                     " bytes)");
  if (std::memcmp(head.data(), kShardMagic, sizeof(kShardMagic)) != 0)
    reject(path, "not an fsdpp token shard (expected magic \"FSDPPTOK\")");
  const auto version = load_le<uint32_t>(head, 8);
  if (version != kShardVersion)
    reject(path, "fsdpp token shard version " + std::to_string(version) + " is not supported (expected 1)");
  const auto dtype = load_le<uint32_t>(head, 12);
  if (dtype != static_cast<uint32_t>(TokenDtype::kUint16) && dtype != static_cast<uint32_t>(TokenDtype::kUint32))
    reject(path, "unknown token dtype code " + std::to_string(dtype) + " (expected 1 = uint16 or 2 = uint32)");
  for (int64_t i = 32; i < kShardHeaderBytes; ++i)
    if (head[i] != 0)
      reject(path, "reserved header byte " + std::to_string(i) + " is nonzero (expected zero in version 1)");
  ShardHeader h;
  h.dtype = static_cast<TokenDtype>(dtype);
  const auto count = load_le<uint64_t>(head, 16);
  const auto documents = load_le<uint64_t>(head, 24);
  const uint64_t width = static_cast<uint64_t>(token_dtype_bytes(h.dtype));
  if (count > (file_size - kShardHeaderBytes) / width || kShardHeaderBytes + count * width != file_size) {
    const bool fits = count <= (UINT64_MAX - kShardHeaderBytes) / width;  // else the byte count overflows
    reject(path, "header says " + std::to_string(count) + " " + to_string(h.dtype) + " tokens (" +
                     (fits ? std::to_string(kShardHeaderBytes + count * width) : std::string("more than 2^64")) +
                     " bytes with the header) but the file has " + std::to_string(file_size) + " bytes");
  }
  if (documents > count)
    reject(path, "header says " + std::to_string(documents) + " documents but only " + std::to_string(count) +
                     " tokens (expected at most one document per token)");
  h.token_count = static_cast<int64_t>(count);
  h.document_count = static_cast<int64_t>(documents);
  return h;
}

ShardHeader read_shard_header(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) reject(path, "cannot open token shard");
  std::string head(kShardHeaderBytes, '\0');
  in.read(head.data(), kShardHeaderBytes);
  head.resize(static_cast<size_t>(in.gcount()));
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) reject(path, "cannot read the size of the token shard: " + ec.message());
  return parse_shard_header(path, head, size);
}

}  // namespace fsdpp::data
