// Removing a directory tree, without std::filesystem::remove_all.
//
// Why not remove_all: the CUDA wheels of LibTorch 2.x link libstdc++ statically into
// libtorch.so and export its std::filesystem symbols; a binary linked against that
// libtorch.so binds remove_all to the exported copy, which jumps to address 0 when
// called (seen with PyTorch 2.11 + GCC 13). POSIX nftw() has no such trap.
#pragma once

#include <filesystem>
#include <system_error>

namespace fsdpp::io {

// Deletes `path` and everything below it (symbolic links are removed, not followed). A
// missing path is not an error. Returns false and sets `error` on the first failure
// (entries already removed stay removed).
bool remove_tree(const std::filesystem::path& path, std::error_code& error) noexcept;

// As above; throws std::filesystem::filesystem_error naming the path on failure.
void remove_tree(const std::filesystem::path& path);

}  // namespace fsdpp::io
