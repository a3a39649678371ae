#include "core/data/token_file.h"

#include <ATen/ATen.h>

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/atomic_file.h"

namespace fsdpp::data {

namespace {
constexpr int kHeaderInts = 256;
constexpr int32_t kLlmcVersion = 1;
}  // namespace

at::Tensor read_token_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open token file");
  int32_t header[kHeaderInts] = {};
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  if (in.gcount() != static_cast<std::streamsize>(sizeof(header)) || header[0] != kLlmcMagic)
    throw std::runtime_error(path.string() + ": not a token file (expected the llm.c header with magic " +
                             std::to_string(kLlmcMagic) + ")");
  if (header[1] != kLlmcVersion)
    throw std::runtime_error(path.string() + ": llm.c token file version " + std::to_string(header[1]) +
                             " is not supported (expected 1: uint16 tokens)");
  const int64_t count = header[2];
  auto size = std::filesystem::file_size(path);
  auto expected = sizeof(header) + static_cast<uint64_t>(count) * 2;
  if (count < 0 || size != expected)
    throw std::runtime_error(path.string() + ": header says " + std::to_string(count) + " tokens (" +
                             std::to_string(expected) + " bytes) but the file has " + std::to_string(size) + " bytes");
  std::vector<uint16_t> raw(static_cast<size_t>(count));
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(count * 2));
  auto out = at::empty({count}, at::kLong);
  auto* dst = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) dst[i] = raw[i];
  return out;
}

void write_llmc_tokens(const std::filesystem::path& path, const at::Tensor& tokens) {
  auto flat = tokens.to(at::kLong).reshape({-1}).contiguous();
  if (flat.numel() > 0 && (flat.min().item<int64_t>() < 0 || flat.max().item<int64_t>() > 65535))
    throw std::invalid_argument(path.string() + ": llm.c token files hold uint16 tokens (0..65535)");
  int32_t header[kHeaderInts] = {};
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
