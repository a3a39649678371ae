#include "harness/testing/byte_mutator.h"

#include <array>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <utility>

namespace fsdpp::harness {
namespace {

// Bytes that readers of text and binary formats treat specially: bounds, signs, JSON and
// YAML punctuation, NUL and the high bit (libFuzzer's "interesting values" play this part).
constexpr std::array<uint8_t, 20> kInterestingBytes = {0x00, 0x01, 0x7f, 0x80, 0xff, '0', '9',  '-', '"', '\\',
                                                       '{',  '}',  '[',  ']',  ',',  ':', '\n', ' ', '.', 'e'};

// Integers at the edges of the widths headers use (counts, offsets, lengths).
constexpr std::array<uint64_t, 12> kInterestingIntegers = {
    0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff, 1ULL << 62, ~0ULL};

// ASCII numbers that a JSON or YAML reader must bound: overflow of every integer width,
// negatives where counts are expected, and floating-point extremes.
constexpr std::array<const char*, 12> kInterestingNumbers = {"0",
                                                             "-1",
                                                             "1",
                                                             "2147483648",
                                                             "4294967296",
                                                             "9223372036854775807",
                                                             "18446744073709551616",
                                                             "-9223372036854775809",
                                                             "1e308",
                                                             "1e-320",
                                                             "nan",
                                                             "99999999999999999999999"};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The quoted word of one dictionary line, unescaped; throws with `where` on anything else.
std::string parse_dictionary_word(std::string_view line, const std::string& where) {
  const size_t open = line.find('"');
  const size_t close = line.rfind('"');
  if (open == std::string_view::npos || close == open ||
      line.find_first_not_of(" \t\r", close + 1) != std::string_view::npos)
    throw std::runtime_error(where + ": expected a quoted word (\"...\" or name=\"...\")");
  std::string word;
  for (size_t i = open + 1; i < close; ++i) {
    if (line[i] != '\\') {
      word.push_back(line[i]);
      continue;
    }
    if (i + 1 >= close) throw std::runtime_error(where + ": a backslash ends the word");
    const char next = line[++i];
    if (next == '\\' || next == '"') {
      word.push_back(next);
    } else if (next == 'x' && i + 2 < close && hex_digit(line[i + 1]) >= 0 && hex_digit(line[i + 2]) >= 0) {
      word.push_back(static_cast<char>(hex_digit(line[i + 1]) * 16 + hex_digit(line[i + 2])));
      i += 2;
    } else {
      throw std::runtime_error(where + ": unknown escape '\\" + std::string(1, next) + "' (known: \\\\ \\\" \\xHH)");
    }
  }
  return word;
}

}  // namespace

std::vector<std::string> read_fuzz_dictionary(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot open the fuzz dictionary");
  std::vector<std::string> words;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    words.push_back(parse_dictionary_word(line, path.string() + ":" + std::to_string(number)));
  }
  return words;
}

ByteMutator::ByteMutator(uint64_t seed, std::vector<std::string> dictionary)
    : rng_(seed), dictionary_(std::move(dictionary)) {}

size_t ByteMutator::below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

std::string ByteMutator::mutate(std::string input, std::string_view other, size_t max_size) {
  const size_t edits = 1 + below(4);
  for (size_t i = 0; i < edits; ++i) edit_once(input, other);
  if (input.size() > max_size) input.resize(max_size);
  return input;
}

void ByteMutator::edit_once(std::string& bytes, std::string_view other) {
  enum Edit {
    kFlipBit,
    kSetRandomByte,
    kSetInterestingByte,
    kEraseRange,
    kInsertRandomBytes,
    kCopyRange,
    kInsertWord,
    kOverwriteWithWord,
    kTruncate,
    kSplice,
    kChangeAsciiNumber,
    kSetInterestingInteger,
    kEditCount
  };
  const auto edit = static_cast<Edit>(below(kEditCount));
  const size_t size = bytes.size();
  // Edits that need bytes to work on insert instead when there are none.
  if (size == 0 && edit != kInsertWord && edit != kSplice) {
    bytes.push_back(static_cast<char>(kInterestingBytes[below(kInterestingBytes.size())]));
    return;
  }
  switch (edit) {
    case kFlipBit: bytes[below(size)] ^= static_cast<char>(1u << below(8)); break;
    case kSetRandomByte: bytes[below(size)] = static_cast<char>(below(256)); break;
    case kSetInterestingByte:
      bytes[below(size)] = static_cast<char>(kInterestingBytes[below(kInterestingBytes.size())]);
      break;
    case kEraseRange: {
      const size_t at = below(size);
      bytes.erase(at, 1 + below(std::min<size_t>(64, size - at)));
      break;
    }
    case kInsertRandomBytes: {
      std::string inserted(1 + below(8), '\0');
      for (char& c : inserted) c = static_cast<char>(below(256));
      bytes.insert(below(size + 1), inserted);
      break;
    }
    case kCopyRange: {
      const size_t from = below(size);
      const std::string range = bytes.substr(from, 1 + below(std::min<size_t>(256, size - from)));
      bytes.insert(below(size + 1), range);
      break;
    }
    case kInsertWord:
    case kOverwriteWithWord: {
      if (dictionary_.empty()) {
        bytes.insert(below(size + 1), 1, static_cast<char>(below(256)));
        break;
      }
      const std::string& word = dictionary_[below(dictionary_.size())];
      const size_t at = below(size + 1);
      if (edit == kInsertWord)
        bytes.insert(at, word);
      else
        bytes.replace(at, std::min(word.size(), size - at), word);
      break;
    }
    case kTruncate: bytes.resize(below(size)); break;
    case kSplice: {
      // This input's head, then the other's tail from a random point.
      const size_t head = below(size + 1);
      const size_t tail_from = other.empty() ? 0 : below(other.size());
      bytes = bytes.substr(0, head) + std::string(other.substr(tail_from));
      break;
    }
    case kChangeAsciiNumber: {
      // The digits around a random digit, replaced by an edge value.
      size_t at = below(size);
      size_t scanned = 0;
      while (scanned < size && !(bytes[at] >= '0' && bytes[at] <= '9')) {
        at = (at + 1) % size;
        ++scanned;
      }
      if (scanned == size) {
        bytes.insert(below(size + 1), kInterestingNumbers[below(kInterestingNumbers.size())]);
        break;
      }
      size_t begin = at, end = at;
      while (begin > 0 && bytes[begin - 1] >= '0' && bytes[begin - 1] <= '9') --begin;
      while (end < size && bytes[end] >= '0' && bytes[end] <= '9') ++end;
      bytes.replace(begin, end - begin, kInterestingNumbers[below(kInterestingNumbers.size())]);
      break;
    }
    case kSetInterestingInteger: {
      // Little-endian, as every binary header fsdpp reads (safetensors, GGUF, .tok, llm.c).
      const size_t width = size_t{1} << below(4);  // 1, 2, 4 or 8 bytes
      if (size < width) break;
      const uint64_t value = kInterestingIntegers[below(kInterestingIntegers.size())];
      const size_t at = below(size - width + 1);
      for (size_t b = 0; b < width; ++b) bytes[at + b] = static_cast<char>((value >> (8 * b)) & 0xff);
      break;
    }
    case kEditCount: break;
  }
}

}  // namespace fsdpp::harness
