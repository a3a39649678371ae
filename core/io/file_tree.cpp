#include "core/io/file_tree.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

namespace fsdpp::io {
namespace {

thread_local int first_errno = 0;

// Called children first (FTW_DEPTH): files and links are unlinked, then their directory.
int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  if (std::remove(path) != 0 && errno != ENOENT) {
    first_errno = errno;
    return 1;  // stops the walk
  }
  return 0;
}

}  // namespace

bool remove_tree(const std::filesystem::path& path, std::error_code& error) noexcept {
  error.clear();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;
    error = std::error_code(errno, std::generic_category());
    return false;
  }
  first_errno = 0;
  const int walked = ::nftw(path.c_str(), remove_entry, 64, FTW_DEPTH | FTW_PHYS);
  if (walked == 0) return true;
  error = std::error_code(first_errno != 0 ? first_errno : errno, std::generic_category());
  return false;
}

void remove_tree(const std::filesystem::path& path) {
  std::error_code error;
  if (!remove_tree(path, error)) throw std::filesystem::filesystem_error("cannot remove", path, error);
}

}  // namespace fsdpp::io
