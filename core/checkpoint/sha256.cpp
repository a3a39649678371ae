#include "core/checkpoint/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace fsdpp::checkpoint {

void Sha256::FreeContext::operator()(EVP_MD_CTX* context) const { EVP_MD_CTX_free(context); }

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (!context_) throw std::runtime_error("sha256: EVP_MD_CTX_new failed (out of memory)");
  if (EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: EVP_DigestInit_ex(EVP_sha256) failed");
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, size_t bytes) {
  if (finished_) throw std::logic_error("sha256: update() after hex_digest()");
  if (EVP_DigestUpdate(context_.get(), data, bytes) != 1) throw std::runtime_error("sha256: EVP_DigestUpdate failed");
}

std::string Sha256::hex_digest() {
  if (finished_) throw std::logic_error("sha256: hex_digest() called twice");
  finished_ = true;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_bytes = 0;
  if (EVP_DigestFinal_ex(context_.get(), digest, &digest_bytes) != 1 || digest_bytes != 32)
    throw std::runtime_error("sha256: EVP_DigestFinal_ex failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * static_cast<size_t>(digest_bytes));
  for (unsigned int i = 0; i < digest_bytes; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 0xF]);
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex_digest();
}

FileDigest sha256_of_file(const std::filesystem::path& path) {
  Sha256 h;  // before the open: its constructor may throw
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot read " + path.string() + ": " + std::strerror(errno));
  FileDigest out;
  std::vector<uint8_t> buffer(size_t(4) << 20);
  for (;;) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw std::runtime_error("cannot read " + path.string() + ": " + std::strerror(err));
    }
    if (n == 0) break;
    h.update(buffer.data(), static_cast<size_t>(n));
    out.bytes += static_cast<uint64_t>(n);
  }
  ::close(fd);
  out.sha256 = h.hex_digest();
  return out;
}

}  // namespace fsdpp::checkpoint
