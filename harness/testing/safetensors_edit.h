// Test helper: a safetensors file rewritten with some tensors renamed, dropped or added, for
// tests that need a checkpoint missing a tensor, holding one too many, or named as another
// exporter names it.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace fsdpp::harness {

// Rewrites `path` in place (atomically): each tensor keeps its bytes under the name
// `rename(name)` returns, or is dropped when it returns nothing.
void rewrite_safetensors(const std::filesystem::path& path,
                         const std::function<std::optional<std::string>(const std::string& name)>& rename);

// Drops one tensor.
void drop_tensor(const std::filesystem::path& path, const std::string& name);

// Adds `tensor` (contiguous, CPU) under `name`, after the file's own tensors.
void add_tensor(const std::filesystem::path& path, const std::string& name, const at::Tensor& tensor);

}  // namespace fsdpp::harness
