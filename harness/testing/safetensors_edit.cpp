#include "harness/testing/safetensors_edit.h"

#include "core/io/safetensors.h"

namespace fsdpp::harness {

namespace {

// The tensors of `path` (copied out of its mapping) under their new names.
io::NamedTensors renamed_tensors(const std::filesystem::path& path,
                                 const std::function<std::optional<std::string>(const std::string& name)>& rename) {
  io::NamedTensors kept;
  auto file = io::SafetensorsFile::open(path);
  for (const auto& name : file.names())
    if (auto new_name = rename(name)) kept.emplace_back(*new_name, file.copy_tensor(name));
  return kept;
}

}  // namespace

void rewrite_safetensors(const std::filesystem::path& path,
                         const std::function<std::optional<std::string>(const std::string& name)>& rename) {
  io::write_safetensors(path, renamed_tensors(path, rename));
}

void drop_tensor(const std::filesystem::path& path, const std::string& name) {
  rewrite_safetensors(path, [&](const std::string& n) -> std::optional<std::string> {
    if (n == name) return std::nullopt;
    return n;
  });
}

void add_tensor(const std::filesystem::path& path, const std::string& name, const at::Tensor& tensor) {
  auto kept = renamed_tensors(path, [](const std::string& n) -> std::optional<std::string> { return n; });
  kept.emplace_back(name, tensor);
  io::write_safetensors(path, kept);
}

}  // namespace fsdpp::harness
