// SHA-256 (FIPS 180-4), the checksum of every file in a checkpoint (CHECKPOINT.md) and of
// index.json's body. Computed by OpenSSL's libcrypto (EVP_sha256), which picks the CPU's
// SHA extensions itself where they exist; the digests are the standard ones, so
// checkpoints written with the hand-written hash this replaced verify unchanged.
//
// Errors: a libcrypto failure (out of memory, a FIPS provider refusing the digest) throws
// std::runtime_error naming the call. Not thread-safe per object; separate objects are
// independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

namespace fsdpp::checkpoint {

// A streaming hash: update() any number of times, then hex_digest() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void update(const void* data, size_t bytes);
  // Lower-case hex of the 32-byte digest. Ends the hash: a second call, or update() after
  // it, throws std::logic_error.
  std::string hex_digest();

 private:
  struct FreeContext {
    void operator()(evp_md_ctx_st* context) const;
  };
  std::unique_ptr<evp_md_ctx_st, FreeContext> context_;
  bool finished_ = false;
};

std::string sha256_hex(std::string_view bytes);

// Digest and size of a whole file, read sequentially. Throws std::runtime_error naming
// the file when it cannot be opened or read.
struct FileDigest {
  std::string sha256;
  uint64_t bytes = 0;
};
FileDigest sha256_of_file(const std::filesystem::path& path);

}  // namespace fsdpp::checkpoint
