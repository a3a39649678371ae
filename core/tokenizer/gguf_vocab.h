// Reads the tokenizer vocabulary from a GGUF file's metadata (llama.cpp's model format,
// https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): the tokenizer.ggml.* keys
// only; tensors are not read. Used for llama.cpp's ggml-vocab-*.gguf reference vocabularies.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fsdpp::tokenizer {

struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "llama" (SentencePiece), "gpt2", ...
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens, indexed by id
  std::vector<float> scores;         // tokenizer.ggml.scores (SentencePiece merge priority), or empty
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (1 normal ... 3 control, 6 byte), or empty
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("left right"), or empty
  bool add_space_prefix = true;      // tokenizer.ggml.add_space_prefix (llama.cpp's default: true)
  std::string pre;                   // tokenizer.ggml.pre ("gpt-2", "llama-bpe", "qwen2", ...), or empty
};

// Throws std::runtime_error if `path` cannot be read, std::invalid_argument naming the file
// if it is not GGUF (v2 or v3) or lacks tokenizer.ggml.model / tokenizer.ggml.tokens.
GgufVocab read_gguf_vocab(const std::filesystem::path& path);

}  // namespace fsdpp::tokenizer
