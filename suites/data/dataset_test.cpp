// TokenDataset concatenates token files in spec order (files, directories, patterns,
// comma lists), cuts the documented windows from them, and names the input in every error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <numeric>

#include "core/data/token_dataset.h"
#include "core/data/token_file.h"
#include "core/data/token_shard.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::data {
namespace {

namespace fs = std::filesystem;
using harness::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int32_t> iota(int32_t from, int32_t count) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), from);
  return v;
}

std::vector<int64_t> as_vector(const at::Tensor& t) {
  auto c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// Tokens 0..29 in three files of both formats: a.tok 0..9, b.bin 10..24, c.tok 25..29.
std::string write_three_files(const TempDir& dir) {
  write_token_shard(dir / "a.tok", iota(0, 10), 1, TokenDtype::kUint16);
  write_llmc_tokens(dir / "b.bin", torch::arange(10, 25));
  write_token_shard(dir / "c.tok", iota(25, 5), 1, TokenDtype::kUint32);
  return (dir / "a.tok").string() + "," + (dir / "b.bin").string() + "," + (dir / "c.tok").string();
}

TEST(TokenDataset, ConcatenatesTheFilesOfACommaListInOrder) {
  TempDir dir;
  auto d = TokenDataset::open(write_three_files(dir));
  EXPECT_EQ(d.num_tokens(), 30);
  EXPECT_EQ(d.files().size(), 3u);
  EXPECT_EQ(as_vector(d.tokens(0, 30)), as_vector(torch::arange(30)));
  EXPECT_EQ(as_vector(d.tokens(8, 4)), (std::vector<int64_t>{8, 9, 10, 11}));
  EXPECT_EQ(d.max_token(), 29);
}

TEST(TokenDataset, WindowCrossingAFileBoundaryIsContiguous) {
  TempDir dir;
  auto d = TokenDataset::open(write_three_files(dir));
  auto [inputs, targets] = d.windows({2}, 4);  // tokens 8..12: a.tok then b.bin
  EXPECT_EQ(as_vector(inputs), (std::vector<int64_t>{8, 9, 10, 11}));
  EXPECT_EQ(as_vector(targets), (std::vector<int64_t>{9, 10, 11, 12}));
}

TEST(TokenDataset, WindowIIsTokensITimesTThroughITimesTPlusT) {
  TempDir dir;
  auto d = TokenDataset::open(write_three_files(dir));
  for (int64_t seq_len : {1, 3, 4, 7, 29}) {
    const int64_t n = d.num_windows(seq_len);
    std::vector<int64_t> indices(static_cast<size_t>(n));
    std::iota(indices.rbegin(), indices.rend(), 0);  // reversed: rows follow the indices
    auto [inputs, targets] = d.windows(indices, seq_len);
    ASSERT_EQ(inputs.sizes(), (at::IntArrayRef{n, seq_len}));
    for (int64_t r = 0; r < n; ++r) {
      const int64_t i = indices[static_cast<size_t>(r)];
      EXPECT_EQ(as_vector(inputs[r]), as_vector(torch::arange(i * seq_len, i * seq_len + seq_len))) << seq_len;
      EXPECT_EQ(as_vector(targets[r]), as_vector(torch::arange(i * seq_len + 1, i * seq_len + seq_len + 1))) << seq_len;
    }
  }
}

TEST(TokenDataset, NumWindowsIsTokensMinusOneOverSeqLen) {
  TempDir dir;
  auto d = TokenDataset::open(write_three_files(dir));  // 30 tokens
  EXPECT_EQ(d.num_windows(1), 29);
  EXPECT_EQ(d.num_windows(4), 7);
  EXPECT_EQ(d.num_windows(29), 1);
  EXPECT_EQ(d.num_windows(30), 0);
  EXPECT_THROW(d.num_windows(0), std::invalid_argument);
}

TEST(TokenDataset, DirectoryIsItsTokAndBinFilesSortedByName) {
  TempDir dir;
  write_token_shard(dir / "b.tok", iota(3, 2), 1, TokenDtype::kUint16);
  write_llmc_tokens(dir / "a.bin", torch::arange(0, 3));
  std::ofstream(dir / "notes.txt") << "not tokens";
  auto d = TokenDataset::open(dir.path().string());
  EXPECT_THAT(d.files(), ElementsAre(dir / "a.bin", dir / "b.tok"));
  EXPECT_EQ(as_vector(d.tokens(0, 5)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(TokenDataset, PatternIsItsMatchingFilesSortedByName) {
  TempDir dir;
  write_token_shard(dir / "train_000001.tok", iota(2, 2), 1, TokenDtype::kUint16);
  write_token_shard(dir / "train_000000.tok", iota(0, 2), 1, TokenDtype::kUint16);
  write_token_shard(dir / "eval_000000.tok", iota(100, 2), 1, TokenDtype::kUint16);
  auto d = TokenDataset::open((dir / "train_*.tok").string());
  EXPECT_THAT(d.files(), ElementsAre(dir / "train_000000.tok", dir / "train_000001.tok"));
  EXPECT_EQ(d.num_tokens(), 4);
}

TEST(TokenDataset, EmptyFilesBetweenOthersAreSkipped) {
  TempDir dir;
  write_token_shard(dir / "a.tok", iota(0, 3), 1, TokenDtype::kUint16);
  write_token_shard(dir / "b.tok", {}, 0, TokenDtype::kUint16);
  write_token_shard(dir / "c.tok", iota(3, 3), 1, TokenDtype::kUint16);
  auto d = TokenDataset::open(dir.path().string());
  EXPECT_EQ(as_vector(d.tokens(0, 6)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(as_vector(d.tokens(3, 1)), (std::vector<int64_t>{3}));
}

TEST(TokenDataset, EmptyDatasetIsAnError) {
  TempDir dir;
  write_token_shard(dir / "a.tok", {}, 0, TokenDtype::kUint16);
  EXPECT_THAT([&] { TokenDataset::open((dir / "a.tok").string()); },
              ::testing::ThrowsMessage<std::runtime_error>(AllOf(HasSubstr("a.tok"), HasSubstr("empty"))));
}

TEST(TokenDataset, FewerTokensThanOneWindowIsAnErrorNamingTheData) {
  TempDir dir;
  write_token_shard(dir / "a.tok", iota(0, 5), 1, TokenDtype::kUint16);
  auto d = TokenDataset::open((dir / "a.tok").string());
  EXPECT_NO_THROW(d.require_window(4, "--data a.tok"));
  EXPECT_THAT([&] { d.require_window(5, "--data a.tok"); },
              ::testing::ThrowsMessage<std::runtime_error>(
                  AllOf(HasSubstr("--data a.tok"), HasSubstr("5 tokens"), HasSubstr("expected at least 6"))));
}

TEST(TokenDataset, WindowOutsideTheDatasetIsAnError) {
  TempDir dir;
  write_token_shard(dir / "a.tok", iota(0, 9), 1, TokenDtype::kUint16);
  auto d = TokenDataset::open((dir / "a.tok").string());
  EXPECT_THROW(d.windows({2}, 4), std::out_of_range);
  EXPECT_THROW(d.windows({-1}, 4), std::out_of_range);
  EXPECT_THROW(d.tokens(5, 5), std::out_of_range);
}

TEST(TokenDataset, MissingPathIsAnErrorNamingIt) {
  TempDir dir;
  write_token_shard(dir / "a.tok", iota(0, 5), 1, TokenDtype::kUint16);
  const std::string missing = (dir / "missing.tok").string();
  EXPECT_THAT([&] { TokenDataset::open((dir / "a.tok").string() + "," + missing); },
              ::testing::ThrowsMessage<std::runtime_error>(AllOf(HasSubstr(missing), HasSubstr("no such file"))));
}

TEST(TokenDataset, UnknownMagicIsAnErrorNamingTheFile) {
  TempDir dir;
  std::ofstream(dir / "x.bin") << std::string(2048, 'x');
  EXPECT_THAT([&] { TokenDataset::open((dir / "x.bin").string()); },
              ::testing::ThrowsMessage<std::runtime_error>(AllOf(HasSubstr("x.bin"), HasSubstr("not a token file"))));
}

TEST(TokenDataset, DirectoryOrPatternWithoutTokenFilesIsAnError) {
  TempDir dir;
  std::ofstream(dir / "notes.txt") << "text";
  EXPECT_THAT([&] { TokenDataset::open(dir.path().string()); },
              ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("no token files")));
  EXPECT_THAT([&] { TokenDataset::open((dir / "train_*.tok").string()); },
              ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("no file matches")));
  EXPECT_THAT([&] { TokenDataset::open((dir / "a.tok").string() + ",,"); },
              ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("empty entry")));
}

}  // namespace
}  // namespace fsdpp::data
