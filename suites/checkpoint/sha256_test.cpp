// The checkpoint checksum is SHA-256 as FIPS 180-4 defines it, on both code paths.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/checkpoint/sha256.h"

namespace fsdpp::checkpoint {
namespace {

TEST(Sha256, MatchesTheFips180ExampleDigests) {
  // FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA2_Additional.pdf").
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, HardwareAndPortablePathsAgreeForEveryLengthAndSplit) {
  std::mt19937 random(7);
  for (size_t length = 0; length < 600; length += 13) {
    std::string data(length, '\0');
    for (auto& c : data) c = static_cast<char>(random());
    Sha256 fast(/*allow_hardware=*/true), portable(/*allow_hardware=*/false);
    size_t split = length / 3;
    fast.update(data.data(), split);
    fast.update(data.data() + split, length - split);
    portable.update(data.data(), length);
    EXPECT_EQ(fast.hex_digest(), portable.hex_digest()) << "length " << length;
  }
}

}  // namespace
}  // namespace fsdpp::checkpoint
