// A read-only, memory-mapped sequence of tokens made of one or more token files
// (fsdpp `.tok` shards or llm.c `.bin` files, told apart by their magic), and the
// windows training and evaluation cut from it.
//
// Window i (for a sequence length T) = tokens[i*T .. i*T+T] (T+1 tokens): the inputs are
// its first T tokens, the targets its last T. Windows do not overlap except for that one
// shared token, so there are (num_tokens - 1) / T of them.
//
// const calls are safe from many threads at once, except a first max_token() call.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fsdpp::data {

class TokenDataset {
 public:
  // `spec`: a token file, a directory (every *.tok and *.bin file in it, sorted by name),
  // a name pattern with `*` / `?` in its last component (e.g. "out/train_*.tok": the
  // matching files, sorted by name), or several of those separated by commas; the files
  // are concatenated in that order.
  // Throws std::runtime_error naming the path and what was expected: a missing or
  // unreadable path, a directory or pattern without token files, a file with an unknown
  // magic, an unsupported version or a size that disagrees with its header. An empty
  // dataset (zero tokens) is an error too.
  static TokenDataset open(const std::string& spec);
  // These files concatenated in order (no spec syntax: a comma is part of a name).
  // Throws as open() does.
  static TokenDataset open_files(const std::vector<std::filesystem::path>& files);

  int64_t num_tokens() const { return num_tokens_; }
  const std::vector<std::filesystem::path>& files() const { return files_; }
  // The largest token id in the dataset (scanned once, on first call).
  int64_t max_token() const;

  int64_t num_windows(int64_t seq_len) const;
  // Throws std::runtime_error naming `what` (e.g. "--data train/") when the dataset holds
  // fewer than seq_len + 1 tokens (not one window).
  void require_window(int64_t seq_len, const std::string& what) const;

  // Inputs and targets of the given windows, each [indices.size(), seq_len] int64.
  std::pair<at::Tensor, at::Tensor> windows(const std::vector<int64_t>& indices, int64_t seq_len) const;
  // Tokens [begin, begin + count) as int64.
  at::Tensor tokens(int64_t begin, int64_t count) const;

  TokenDataset(TokenDataset&&) noexcept;
  TokenDataset& operator=(TokenDataset&&) noexcept;
  ~TokenDataset();

 private:
  TokenDataset();
  // Tokens [begin, begin + count) (in range) widened to int64 into `out`.
  void copy_tokens(int64_t begin, int64_t count, int64_t* out) const;

  struct Mapped;  // one mapped file
  std::vector<std::unique_ptr<Mapped>> mapped_;
  std::vector<std::filesystem::path> files_;
  std::vector<int64_t> file_starts_;  // global index of each file's first token
  int64_t num_tokens_ = 0;
  mutable int64_t max_token_ = -1;
};

}  // namespace fsdpp::data
