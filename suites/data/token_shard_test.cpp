// fsdpp token shards (core/data/TOKENS.md) round-trip both widths, and every way a shard
// or an llm.c file can be malformed is rejected with the file's name and the expectation.
#include "core/data/token_shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <iterator>

#include "core/data/token_dataset.h"
#include "core/data/token_file.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::data {
namespace {

namespace fs = std::filesystem;
using harness::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

std::vector<int64_t> shard_values(const at::Tensor& t) {
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

TEST(TokenShard, RoundTripsUint16Tokens) {
  TempDir dir;
  const std::vector<int32_t> tokens = {50256, 0, 1, 65535, 7};
  write_token_shard(dir / "a.tok", tokens, 2, TokenDtype::kUint16);

  const auto header = read_shard_header(dir / "a.tok");
  EXPECT_EQ(header.dtype, TokenDtype::kUint16);
  EXPECT_EQ(header.token_count, 5);
  EXPECT_EQ(header.document_count, 2);
  EXPECT_EQ(fs::file_size(dir / "a.tok"), 64u + 5 * 2);
  EXPECT_EQ(shard_values(read_token_file(dir / "a.tok")), std::vector<int64_t>(tokens.begin(), tokens.end()));
}

TEST(TokenShard, RoundTripsUint32Tokens) {
  TempDir dir;
  const std::vector<int32_t> tokens = {0, 65536, 128000, 2147483647};
  write_token_shard(dir / "a.tok", tokens, 1, TokenDtype::kUint32);

  EXPECT_EQ(read_shard_header(dir / "a.tok").dtype, TokenDtype::kUint32);
  EXPECT_EQ(fs::file_size(dir / "a.tok"), 64u + 4 * 4);
  EXPECT_EQ(shard_values(read_token_file(dir / "a.tok")), std::vector<int64_t>(tokens.begin(), tokens.end()));
}

TEST(TokenShard, HeaderBytesAreTheSpecifiedLayout) {
  TempDir dir;
  write_token_shard(dir / "a.tok", {1, 2, 3}, 1, TokenDtype::kUint16);
  const std::string bytes = read_bytes(dir / "a.tok");
  const std::string expected_header("FSDPPTOK\x01\0\0\0\x01\0\0\0\x03\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0", 32);
  EXPECT_EQ(bytes.substr(0, 32), expected_header);
  EXPECT_EQ(bytes.substr(32, 32), std::string(32, '\0'));
  EXPECT_EQ(bytes.substr(64), std::string("\x01\0\x02\0\x03\0", 6));
}

TEST(TokenShard, WriterPicksUint16ExactlyWhenEveryIdFits) {
  EXPECT_EQ(token_dtype_for_vocab(50257), TokenDtype::kUint16);
  EXPECT_EQ(token_dtype_for_vocab(65536), TokenDtype::kUint16);
  EXPECT_EQ(token_dtype_for_vocab(65537), TokenDtype::kUint32);
}

TEST(TokenShard, WriterRejectsATokenWiderThanTheDtype) {
  TempDir dir;
  EXPECT_THAT([&] { write_token_shard(dir / "a.tok", {65536}, 1, TokenDtype::kUint16); },
              ::testing::ThrowsMessage<std::invalid_argument>(AllOf(HasSubstr("a.tok"), HasSubstr("65536"))));
  EXPECT_FALSE(fs::exists(dir / "a.tok"));
}

struct Corruption {
  std::string name;
  std::function<void(std::string&)> spoil;  // applied to the bytes of a valid 4-token uint16 shard
  std::string expected;
};

class CorruptShard : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptShard, IsRejectedNamingTheFileAndTheExpectation) {
  TempDir dir;
  const fs::path path = dir / "bad.tok";
  write_token_shard(path, {1, 2, 3, 4}, 1, TokenDtype::kUint16);
  std::string bytes = read_bytes(path);
  GetParam().spoil(bytes);
  write_bytes(path, bytes);

  EXPECT_THAT(
      [&] { TokenDataset::open(path.string()); },
      ::testing::ThrowsMessage<std::runtime_error>(AllOf(HasSubstr(path.string()), HasSubstr(GetParam().expected))));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CorruptShard,
    ::testing::Values(
        Corruption{"BadMagic", [](std::string& b) { b[0] = 'X'; }, "not a token file (expected an fsdpp shard"},
        Corruption{"Version2", [](std::string& b) { b[8] = 2; }, "version 2 is not supported (expected 1)"},
        Corruption{"Dtype7", [](std::string& b) { b[12] = 7; },
                   "unknown token dtype code 7 (expected 1 = uint16 or 2 = uint32)"},
        Corruption{"ReservedNonzero", [](std::string& b) { b[40] = 1; }, "reserved header byte 40 is nonzero"},
        Corruption{"Truncated", [](std::string& b) { b.pop_back(); }, "header says 4 uint16 tokens (72 bytes"},
        Corruption{"ExtraBytes", [](std::string& b) { b += "xy"; }, "but the file has 74 bytes"},
        Corruption{"CountBeyondTheFile", [](std::string& b) { b[23] = 0x7f; }, "but the file has 72 bytes"},
        Corruption{"HeaderCut", [](std::string& b) { b.resize(40); },
                   "truncated fsdpp token shard (expected a 64-byte header"},
        Corruption{"Empty", [](std::string& b) { b.clear(); }, "not a token file"}),
    [](const auto& info) { return info.param.name; });

TEST(LlmcTokenFile, IsReadAsItsUint16Tokens) {
  TempDir dir;
  write_llmc_tokens(dir / "a.bin", torch::tensor({50256, 0, 65535, 3}));
  EXPECT_EQ(fs::file_size(dir / "a.bin"), 1024u + 4 * 2);
  EXPECT_EQ(shard_values(read_token_file(dir / "a.bin")), (std::vector<int64_t>{50256, 0, 65535, 3}));
}

TEST(LlmcTokenFile, Version2IsRejectedNamingTheFile) {
  TempDir dir;
  write_llmc_tokens(dir / "a.bin", torch::tensor({1, 2}));
  std::string bytes = read_bytes(dir / "a.bin");
  bytes[4] = 2;  // header[1], the version
  write_bytes(dir / "a.bin", bytes);
  EXPECT_THAT([&] { read_token_file(dir / "a.bin"); },
              ::testing::ThrowsMessage<std::runtime_error>(
                  AllOf(HasSubstr("a.bin"), HasSubstr("llm.c token file version 2 is not supported"))));
}

TEST(LlmcTokenFile, SizeDisagreeingWithTheHeaderIsRejected) {
  TempDir dir;
  write_llmc_tokens(dir / "a.bin", torch::tensor({1, 2}));
  write_bytes(dir / "a.bin", read_bytes(dir / "a.bin") + "z");
  EXPECT_THAT([&] { read_token_file(dir / "a.bin"); },
              ::testing::ThrowsMessage<std::runtime_error>(AllOf(
                  HasSubstr("a.bin"), HasSubstr("header says 2 tokens (1028 bytes) but the file has 1029 bytes"))));
}

TEST(LlmcTokenFile, HeaderCutShortIsRejected) {
  TempDir dir;
  write_llmc_tokens(dir / "a.bin", torch::tensor({1, 2}));
  write_bytes(dir / "a.bin", read_bytes(dir / "a.bin").substr(0, 100));
  EXPECT_THAT(
      [&] { read_token_file(dir / "a.bin"); },
      ::testing::ThrowsMessage<std::runtime_error>(AllOf(HasSubstr("a.bin"), HasSubstr("truncated llm.c token file"))));
}

}  // namespace
}  // namespace fsdpp::data
