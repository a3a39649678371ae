#include "core/data/token_file.h"

#include <ATen/ATen.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "core/data/token_dataset.h"
#include "core/data/token_shard.h"
#include "core/io/atomic_file.h"

namespace fsdpp::data {

namespace {
constexpr int kLlmcHeaderInts = 256;
constexpr int32_t kLlmcVersion = 1;

// llm.c's header (dev/data/data_common.py, write_datafile): the only place it is parsed.
TokenFileLayout llmc_layout(const std::filesystem::path& path, std::string_view head, uint64_t file_size) {
  int32_t header[3];
  std::memcpy(header, head.data(), sizeof(header));
  if (header[1] != kLlmcVersion)
    throw std::runtime_error(path.string() + ": llm.c token file version " + std::to_string(header[1]) +
                             " is not supported (expected 1: uint16 tokens)");
  const int64_t count = header[2];
  const uint64_t expected = kLlmcHeaderInts * 4 + static_cast<uint64_t>(count) * 2;
  if (count < 0 || file_size != expected)
    throw std::runtime_error(path.string() + ": header says " + std::to_string(count) + " tokens (" +
                             std::to_string(expected) + " bytes) but the file has " + std::to_string(file_size) +
                             " bytes");
  return {kLlmcHeaderInts * 4, 2, count};
}
}  // namespace

TokenFileLayout token_file_layout(const std::filesystem::path& path, std::string_view head, uint64_t file_size) {
  if (head.size() >= sizeof(kShardMagic) && std::memcmp(head.data(), kShardMagic, sizeof(kShardMagic)) == 0) {
    const ShardHeader h = parse_shard_header(path, head, file_size);
    return {kShardHeaderBytes, token_dtype_bytes(h.dtype), h.token_count};
  }
  int32_t magic = 0;
  if (head.size() >= 4) std::memcpy(&magic, head.data(), 4);
  if (magic != kLlmcMagic)
    throw std::runtime_error(path.string() +
                             ": not a token file (expected an fsdpp shard with magic \"FSDPPTOK\" or the llm.c "
                             "header with magic " +
                             std::to_string(kLlmcMagic) + ")");
  if (head.size() < kLlmcHeaderInts * 4)
    throw std::runtime_error(path.string() +
                             ": truncated llm.c token file (expected a 1024-byte header, the file has " +
                             std::to_string(file_size) + " bytes)");
  return llmc_layout(path, head, file_size);
}

at::Tensor read_token_file(const std::filesystem::path& path) {
  auto dataset = TokenDataset::open_files({path});
  return dataset.tokens(0, dataset.num_tokens());
}

void write_llmc_tokens(const std::filesystem::path& path, const at::Tensor& tokens) {
  auto flat = tokens.to(at::kLong).reshape({-1}).contiguous();
  if (flat.numel() > 0 && (flat.min().item<int64_t>() < 0 || flat.max().item<int64_t>() > 65535))
    throw std::invalid_argument(path.string() + ": llm.c token files hold uint16 tokens (0..65535)");
  int32_t header[kLlmcHeaderInts] = {};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(flat.numel());
  std::string bytes(reinterpret_cast<const char*>(header), sizeof(header));
  const auto* src = flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    uint16_t t = static_cast<uint16_t>(src[i]);
    bytes.append(reinterpret_cast<const char*>(&t), 2);
  }
  io::write_file_atomic(path, bytes);
}

}  // namespace fsdpp::data
