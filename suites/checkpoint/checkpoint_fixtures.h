// Small helpers shared by the checkpoint suite.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_writer.h"
#include "core/fsdp/sharding.h"

namespace fsdpp::checkpoint::testing {

// Same dtype, same shape, same bytes.
inline bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  auto x = a.cpu().contiguous(), y = b.cpu().contiguous();
  // An empty tensor's data_ptr() is null, and memcmp's pointers must not be, even for 0 bytes.
  if (x.numel() == 0) return true;
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

// The names of the entries directly inside `dir`.
inline std::set<std::string> folder_names(const std::filesystem::path& dir) {
  std::set<std::string> out;
  for (const auto& item : std::filesystem::directory_iterator(dir)) out.insert(item.path().filename().string());
  return out;
}

// The message of what `fn` throws ("" when it does not throw).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Rows [first, first + rows) of `full` as a CheckpointTensor would hold them.
inline at::Tensor rows_of(const at::Tensor& full, int64_t first, int64_t rows) {
  if (full.dim() == 0) return rows == 1 ? full.clone() : at::empty({0}, full.options());
  return full.narrow(0, first, rows).clone();
}

// What rank r of n holds of `full` under FSDP's rule (sharding.h), as one rank's tensor.
inline CheckpointTensor fsdp_rows(const std::string& name, const at::Tensor& full, int n, int r) {
  auto layout = fsdp::ShardLayout::of(full.sizes().vec(), n);
  int64_t first = std::min(layout.dim0, layout.first_row(r)), rows = layout.valid_rows(r);
  return {name, full.sizes().vec(), full.scalar_type(), first, rows_of(full, first, rows)};
}

// `ranks` contents, rank r holding FSDP rank r's rows of every tensor.
inline std::vector<CheckpointContent> split_like_fsdp(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                                      int ranks) {
  std::vector<CheckpointContent> out(ranks);
  for (int r = 0; r < ranks; ++r) {
    out[r].mesh = {"full_shard", ranks, 1};
    for (const auto& [name, full] : tensors) out[r].tensors.push_back(fsdp_rows(name, full, ranks, r));
  }
  return out;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace fsdpp::checkpoint::testing
