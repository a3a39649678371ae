// SHA-256 (FIPS 180-4), the checksum of every file in a checkpoint (CHECKPOINT.md).
// Uses the x86 SHA extensions where the CPU has them (checked at run time), else a
// portable implementation; both give the same digest (tested on the NIST vectors).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace fsdpp::checkpoint {

class Sha256 {
 public:
  // allow_hardware = false forces the portable code (tests compare the two).
  explicit Sha256(bool allow_hardware = true);
  void update(const void* data, size_t bytes);
  // Lower-case hex of the 32-byte digest. Ends the hash: call once.
  std::string hex_digest();

  static bool hardware_available();

 private:
  void compress(const uint8_t* blocks, size_t count);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> pending_{};
  size_t pending_bytes_ = 0;
  uint64_t total_bytes_ = 0;
  bool hardware_ = false;
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
