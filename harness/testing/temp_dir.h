// Scratch space and shell runs for suites and the launcher.
#pragma once

#include <filesystem>
#include <string>
#include <utility>

namespace fsdpp::harness {

// A fresh directory under the system temp dir (mkdtemp), removed with its contents when
// the object dies. `tag` appears in the name.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "fsdpp");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Runs `command` with /bin/sh, stderr merged into stdout: (exit code, output).
std::pair<int, std::string> run_shell(const std::string& command);

}  // namespace fsdpp::harness
