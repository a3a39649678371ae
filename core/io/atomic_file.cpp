#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace fsdpp::io {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* step) {
  throw std::runtime_error("cannot write " + path.string() + ": " + step + " failed: " + std::strerror(errno));
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::string_view content) {
  auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  auto tmp = dir / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "open");
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(tmp, "write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(tmp, "fsync");
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail(path, "rename");
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace fsdpp::io
