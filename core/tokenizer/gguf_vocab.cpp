#include "core/tokenizer/gguf_vocab.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>
#include <vector>

namespace fsdpp::tokenizer {
namespace {

// GGUF metadata value types (gguf.md, "gguf_metadata_value_type").
enum GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

size_t scalar_size(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool: return 1;
    case kU16:
    case kI16: return 2;
    case kU32:
    case kI32:
    case kF32: return 4;
    case kU64:
    case kI64:
    case kF64: return 8;
    default: return 0;
  }
}

// Little-endian cursor over the file's bytes; every read is bounds-checked.
class Reader {
 public:
  Reader(std::string bytes, std::string source) : bytes_(std::move(bytes)), source_(std::move(source)) {}

  template <typename T>
  T read() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::string read_string() {
    const auto len = read<uint64_t>();
    return std::string(take(len), len);
  }
  void skip(uint64_t n) { take(n); }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("tokenizer: '" + source_ + "': " + what + " (expected a GGUF v2/v3 file)");
  }

 private:
  const char* take(uint64_t n) {
    if (n > bytes_.size() - pos_) fail("truncated at byte " + std::to_string(pos_));
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::string bytes_;
  std::string source_;
  size_t pos_ = 0;
};

// Skips one value. Arrays may hold arrays to any depth, so they are walked with a stack of
// the arrays still open rather than by recursion, which a deeply nested file would run off
// the end of the call stack.
void skip_value(Reader& r, uint32_t type) {
  std::vector<std::pair<uint32_t, uint64_t>> open_arrays;  // element type, elements still to skip
  for (;;) {
    if (type == kString) {
      r.read_string();
    } else if (type == kArray) {
      const auto elem = r.read<uint32_t>();
      const auto count = r.read<uint64_t>();
      open_arrays.emplace_back(elem, count);
    } else if (const size_t size = scalar_size(type)) {
      r.skip(size);
    } else {
      r.fail("unknown metadata value type " + std::to_string(type));
    }
    while (!open_arrays.empty() && open_arrays.back().second == 0) open_arrays.pop_back();
    if (open_arrays.empty()) return;
    --open_arrays.back().second;
    type = open_arrays.back().first;
  }
}

// Reads an array header and checks its element type; returns the element count. The bytes
// left must be able to hold that many elements (a string takes at least its 8-byte length),
// so that a corrupt count fails here instead of sizing the caller's allocation.
uint64_t read_array_of(Reader& r, uint32_t type, uint32_t want_elem, const std::string& key) {
  if (type != kArray) r.fail(key + " is not an array");
  const auto elem = r.read<uint32_t>();
  if (elem != want_elem)
    r.fail(key + " has element type " + std::to_string(elem) + ", expected " + std::to_string(want_elem));
  const auto count = r.read<uint64_t>();
  const uint64_t min_element_bytes = want_elem == kString ? sizeof(uint64_t) : scalar_size(want_elem);
  if (count > r.remaining() / min_element_bytes)
    r.fail(key + " has " + std::to_string(count) + " elements, more than the " + std::to_string(r.remaining()) +
           " bytes after it can hold");
  return count;
}

}  // namespace

GgufVocab read_gguf_vocab(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("tokenizer: cannot open '" + path.string() + "' (expected a GGUF vocabulary)");
  Reader r(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), path.string());

  if (r.read<uint32_t>() != 0x46554747u) r.fail("bad magic, not \"GGUF\"");  // "GGUF" little-endian
  const auto version = r.read<uint32_t>();
  if (version != 2 && version != 3) r.fail("version " + std::to_string(version));
  r.read<uint64_t>();  // tensor count: tensors are not read
  const auto kv_count = r.read<uint64_t>();

  GgufVocab vocab;
  bool have_model = false, have_tokens = false;
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string key = r.read_string();
    const auto type = r.read<uint32_t>();
    if (key == "tokenizer.ggml.model" && type == kString) {
      vocab.model = r.read_string();
      have_model = true;
    } else if (key == "tokenizer.ggml.tokens") {
      vocab.tokens.resize(read_array_of(r, type, kString, key));
      for (auto& t : vocab.tokens) t = r.read_string();
      have_tokens = true;
    } else if (key == "tokenizer.ggml.scores") {
      vocab.scores.resize(read_array_of(r, type, kF32, key));
      for (auto& s : vocab.scores) s = r.read<float>();
    } else if (key == "tokenizer.ggml.token_type") {
      vocab.token_types.resize(read_array_of(r, type, kI32, key));
      for (auto& t : vocab.token_types) t = r.read<int32_t>();
    } else if (key == "tokenizer.ggml.merges") {
      vocab.merges.resize(read_array_of(r, type, kString, key));
      for (auto& m : vocab.merges) m = r.read_string();
    } else if (key == "tokenizer.ggml.pre" && type == kString) {
      vocab.pre = r.read_string();
    } else if (key == "tokenizer.ggml.add_space_prefix" && type == kBool) {
      vocab.add_space_prefix = r.read<uint8_t>() != 0;
    } else {
      skip_value(r, type);
    }
  }
  if (!have_model || !have_tokens) r.fail("no tokenizer.ggml.model or tokenizer.ggml.tokens");
  const size_t n = vocab.tokens.size();
  if ((!vocab.scores.empty() && vocab.scores.size() != n) ||
      (!vocab.token_types.empty() && vocab.token_types.size() != n)) {
    r.fail("tokenizer.ggml.scores/token_type length differs from tokenizer.ggml.tokens");
  }
  return vocab;
}

}  // namespace fsdpp::tokenizer
