// Fuzz target: the tokenizer vocabulary of a GGUF file (llama.cpp's format; the
// tokenizer.ggml.* metadata keys, core/tokenizer/gguf_vocab.h).
//
// Feeds the input, written to a scratch file, to BpeTokenizer::from_gguf_vocab
// (core/tokenizer/bpe_tokenizer.cpp), which reads it with read_gguf_vocab
// (core/tokenizer/gguf_vocab.cpp): magic, version, key/value count, then every key with
// its typed value (strings, arrays, scalars), skipping the ones it does not use. A
// vocabulary it accepts encodes and decodes a fixed text (tokenizer_exercise.h).
//
// Expected: a std::exception naming the file. Finding: anything else (crash, sanitizer
// report, non-std exception, hang, an allocation sized by a count field that the file
// cannot hold).
#include <cstdint>

#include "core/tokenizer/bpe_tokenizer.h"
#include "suites/fuzz/fuzz_support.h"
#include "suites/fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fsdpp::fuzz::write_scratch("vocab.gguf", data, size);
  fsdpp::fuzz::reader_may_reject(
      [&] { fsdpp::fuzz::exercise_tokenizer(fsdpp::tokenizer::BpeTokenizer::from_gguf_vocab(path)); });
  return 0;
}
