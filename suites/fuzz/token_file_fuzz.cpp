// Fuzz target: a token file, in either format core/data/TOKENS.md specifies: an fsdpp
// shard (.tok, magic "FSDPPTOK", 64-byte header) or an llm.c .bin file (256 int32 header,
// magic 20240520).
//
// Feeds the input, written to a scratch file, to data::read_shard_header
// (core/data/token_shard.cpp) and to data::TokenDataset::open_files
// (core/data/token_dataset.cpp), which maps the file and tells the formats apart with
// data::token_file_layout (core/data/token_file.cpp). For a file it accepts, every token is
// read (max_token, tokens) and the first and last windows are cut, as training does; the
// header's promise is checked: the tokens it announces fit the file.
//
// Expected: a std::exception naming the file and what was expected. Finding: anything else
// (crash, sanitizer report, non-std exception, hang, huge allocation), or an accepted
// header whose tokens do not fit the file.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>

#include "core/data/token_dataset.h"
#include "core/data/token_file.h"
#include "core/data/token_shard.h"
#include "suites/fuzz/fuzz_support.h"

namespace {

void read_every_token(const std::filesystem::path& path, size_t file_size) {
  const auto dataset = fsdpp::data::TokenDataset::open_files({path});
  const int64_t n = dataset.num_tokens();
  fsdpp::fuzz::check_invariant(
      n > 0 && static_cast<uint64_t>(n) * 2 <= file_size,
      "accepted token count " + std::to_string(n) + " does not fit a " + std::to_string(file_size) + "-byte file");
  (void)dataset.max_token();
  (void)dataset.tokens(0, n);
  for (int64_t seq_len : {int64_t{1}, int64_t{7}}) {
    const int64_t windows = dataset.num_windows(seq_len);
    if (windows > 0) (void)dataset.windows({0, windows - 1}, seq_len);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fsdpp::fuzz::write_scratch("tokens.bin", data, size);
  fsdpp::fuzz::reader_may_reject([&] { (void)fsdpp::data::read_shard_header(path); });
  fsdpp::fuzz::reader_may_reject([&] { read_every_token(path, size); });
  return 0;
}
