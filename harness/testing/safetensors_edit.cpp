#include "harness/testing/safetensors_edit.h"

#include "core/io/safetensors.h"

namespace fsdpp::harness {

void rewrite_safetensors(const std::filesystem::path& path,
                         const std::function<std::optional<std::string>(const std::string& name)>& rename) {
  io::NamedTensors kept;
  {
    auto file = io::SafetensorsFile::open(path);
    for (const auto& name : file.names())
      if (auto new_name = rename(name)) kept.emplace_back(*new_name, file.copy_tensor(name));
  }
  io::write_safetensors(path, kept);
}

void drop_tensor(const std::filesystem::path& path, const std::string& name) {
  rewrite_safetensors(path, [&](const std::string& n) -> std::optional<std::string> {
    if (n == name) return std::nullopt;
    return n;
  });
}

}  // namespace fsdpp::harness
