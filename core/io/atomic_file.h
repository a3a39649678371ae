// Whole-file writes that never leave a torn file behind: write a temporary file beside
// the target, fsync it, rename it over the target, fsync the directory. A reader sees
// either the old content or the new, even across a crash.
#pragma once

#include <filesystem>
#include <string_view>

namespace fsdpp::io {

// Throws std::runtime_error naming the path and the failing step.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

}  // namespace fsdpp::io
