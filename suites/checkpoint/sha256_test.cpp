// The checkpoint checksum is SHA-256 as FIPS 180-4 defines it, whether the bytes come in
// one update or many, and checkpoints hashed before libcrypto computed it still verify.
#include "core/checkpoint/sha256.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_reader.h"
#include "harness/testing/results_samples.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::checkpoint {
namespace {

// FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA2_Additional.pdf").
constexpr const char* kEmptyDigest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr const char* kAbcDigest = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr const char* k448BitMessage = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
constexpr const char* k448BitDigest = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
constexpr const char* k896BitMessage =
    "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
constexpr const char* k896BitDigest = "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1";
constexpr const char* kMillionADigest = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

TEST(Sha256, MatchesTheFips180ExampleDigests) {
  EXPECT_EQ(sha256_hex(""), kEmptyDigest);
  EXPECT_EQ(sha256_hex("abc"), kAbcDigest);
  EXPECT_EQ(sha256_hex(k448BitMessage), k448BitDigest);
  EXPECT_EQ(sha256_hex(k896BitMessage), k896BitDigest);
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), kMillionADigest);
}

TEST(Sha256, StreamingSplitsGiveTheFips180ExampleDigests) {
  Sha256 nothing;
  nothing.update("", 0);
  nothing.update("", 0);
  EXPECT_EQ(nothing.hex_digest(), kEmptyDigest);

  Sha256 abc;
  abc.update("a", 1);
  abc.update("", 0);
  abc.update("bc", 2);
  EXPECT_EQ(abc.hex_digest(), kAbcDigest);

  // Split inside the first block and across the 56-byte padding boundary.
  const std::string message = k448BitMessage;
  Sha256 split;
  split.update(message.data(), 7);
  split.update(message.data() + 7, 48);
  split.update(message.data() + 55, message.size() - 55);
  EXPECT_EQ(split.hex_digest(), k448BitDigest);

  // A million 'a' in pieces of 1, 2, ... 1413 bytes: pieces that straddle every offset
  // in the 64-byte block.
  const std::string a(1413, 'a');
  Sha256 million;
  size_t fed = 0;
  for (size_t piece = 1; fed < 1000000; ++piece) {
    const size_t take = std::min({piece % a.size() + 1, a.size(), 1000000 - fed});
    million.update(a.data(), take);
    fed += take;
  }
  EXPECT_EQ(million.hex_digest(), kMillionADigest);
}

TEST(Sha256, AnySplitOfAMessageGivesItsOneShotDigest) {
  std::mt19937 random(7);
  for (size_t length = 0; length < 600; length += 13) {
    std::string data(length, '\0');
    for (auto& c : data) c = static_cast<char>(random());
    const std::string one_shot = sha256_hex(data);
    // Every first cut, and a second cut halfway through the rest.
    for (size_t first = 0; first <= length; ++first) {
      const size_t second = first + (length - first) / 2;
      Sha256 pieces;
      pieces.update(data.data(), first);
      pieces.update(data.data() + first, second - first);
      pieces.update(data.data() + second, length - second);
      EXPECT_EQ(pieces.hex_digest(), one_shot) << "length " << length << ", cuts at " << first << " and " << second;
    }
  }
}

TEST(Sha256, DigestEndsTheHash) {
  Sha256 hash;
  hash.update("abc", 3);
  EXPECT_EQ(hash.hex_digest(), kAbcDigest);
  EXPECT_THROW(hash.hex_digest(), std::logic_error);
  EXPECT_THROW(hash.update("d", 1), std::logic_error);
}

// suites/checkpoint/fixtures/step-000003-hand-written-sha256 is a checkpoint whose rank
// file digests and index_sha256 were computed by the hand-written SHA-256 that libcrypto
// replaced (the checkpoint_index fuzz target's seed and its rank files, made by
// suites/fuzz/make_seeds.sh). It must open and verify as it did.
TEST(Sha256, CheckpointHashedByTheEarlierImplementationStillVerifies) {
  const auto fixture = harness::source_tree_file("suites/checkpoint/fixtures/step-000003-hand-written-sha256");
  EXPECT_EQ(sha256_of_file(fixture / "rank-00000.safetensors").sha256,
            "d8f86a8d7ded15e45b634c60ba11f595890ecd920bd2776979c895e17821b528");
  EXPECT_EQ(sha256_of_file(fixture / "rank-00001.safetensors").sha256,
            "d0edd4d38f964327d04c3058e4aef6c5b4f4e2db8b0a16ce274a78c15805b3b6");

  harness::TempDir scratch("sha256-fixture");
  const auto dir = scratch / "step-000003";
  std::filesystem::copy(fixture, dir);
  auto reader = CheckpointReader::open(dir);  // checks index_sha256
  EXPECT_NO_THROW(reader.verify_all());       // checks every rank file's sha256
  EXPECT_EQ(reader.read("model/w").sizes(), (std::vector<int64_t>{4, 3}));
}

}  // namespace
}  // namespace fsdpp::checkpoint
