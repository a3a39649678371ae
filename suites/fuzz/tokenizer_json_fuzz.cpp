// Fuzz target: a Hugging Face tokenizer.json.
//
// Feeds the input, written as tokenizer.json in a scratch folder, to
// tokenizer::load_tokenizer (core/tokenizer/load.cpp), which finds it there and reads it
// with BpeTokenizer::from_hf_tokenizer_json (core/tokenizer/bpe_tokenizer.cpp). A tokenizer
// it accepts then encodes and decodes a fixed text with every kind of character (ASCII,
// contractions, digits, spaces, multi-byte UTF-8, an invalid byte), as `fsdpp data
// prepare` and `fsdpp generate` would.
//
// Expected: a std::exception naming the file and field. Finding: anything else (crash,
// sanitizer report, non-std exception, hang, huge allocation).
#include <cstdint>

#include "core/tokenizer/load.h"
#include "suites/fuzz/fuzz_support.h"
#include "suites/fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdpp::fuzz::write_scratch("tokenizer.json", data, size);
  fsdpp::fuzz::reader_may_reject(
      [&] { fsdpp::fuzz::exercise_tokenizer(fsdpp::tokenizer::load_tokenizer(fsdpp::fuzz::scratch_dir())); });
  return 0;
}
