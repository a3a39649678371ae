#include "harness/testing/token_streams.h"

#include <torch/torch.h>

#include "core/data/token_file.h"

namespace fsdpp::harness {

std::filesystem::path write_markov_tokens(const std::filesystem::path& dir, int64_t count, int64_t vocab) {
  torch::manual_seed(11);
  auto noise = torch::randint(0, 3, {count}, torch::kLong);
  auto tokens = torch::empty({count}, torch::kLong);
  int64_t t = 1;
  for (int64_t i = 0; i < count; ++i) {
    t = (t * 5 + 3 + noise[i].item<int64_t>()) % vocab;
    tokens[i] = t;
  }
  auto path = dir / "tokens.bin";
  data::write_llmc_tokens(path, tokens);
  return path;
}

}  // namespace fsdpp::harness
