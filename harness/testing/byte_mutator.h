// Random edits of byte strings, for the brief fuzz step that CI runs in the main build
// (suites/fuzz/brief_main.cpp). The kinds of edit follow libFuzzer's MutationDispatcher
// (bit flips, byte sets, erased, inserted and copied ranges, dictionary words, ASCII numbers
// and integers changed, splices), but nothing here is coverage-guided: inputs are drawn
// from a fixed set of seeds. That is what a step of seconds can afford; ci/fuzz.sh runs the
// coverage-guided libFuzzer targets for as long as it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpp::harness {

// The words of a libFuzzer dictionary file: one quoted string per line, optionally after
// `name=`, with the escapes \\ \" and \xHH; blank lines and lines starting with '#' are
// skipped. Throws std::runtime_error naming the file and line of anything else.
std::vector<std::string> read_fuzz_dictionary(const std::filesystem::path& path);

// Deterministic for a given seed: the same seed, inputs and dictionary give the same edits.
class ByteMutator {
 public:
  ByteMutator(uint64_t seed, std::vector<std::string> dictionary);

  // `input` after 1 to 4 random edits; `other` is a second input that a splice may take
  // its tail from. The result is at most `max_size` bytes (longer results are truncated).
  std::string mutate(std::string input, std::string_view other, size_t max_size);

  // A uniform index in [0, n); n > 0.
  size_t below(size_t n);

 private:
  void edit_once(std::string& bytes, std::string_view other);
  std::mt19937_64 rng_;
  std::vector<std::string> dictionary_;
};

}  // namespace fsdpp::harness
