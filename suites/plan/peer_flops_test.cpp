// The PyTorch peer (harness/peers/torch_peer.py) records its own FLOPs per token; it must be
// fsdpp's (core/plan/step_time_model.h) for every family and size it trains, tied heads and
// grouped-query attention included, and a mixture of experts' share of its expert weights
// (Mixtral). The peer builds its model on the meta device here.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/models/presets.h"
#include "core/plan/model_shape.h"
#include "core/plan/step_time_model.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp {
namespace {

TEST(PlanPeerFlops, ThePeersFlopsPerTokenAreFsdppsForEveryFamilyItTrains) {
  const std::string python = FSDPP_PYTHON;
  if (harness::run_shell(python + " -c 'import torch' 2>/dev/null").first != 0)
    GTEST_SKIP() << python << " cannot import torch";
  harness::TempDir dir;
  const std::string peers = std::string(FSDPP_SOURCE_DIR) + "/harness/peers";
  const std::string script =
      "import sys, torch; sys.path.insert(0, sys.argv[1]); import torch_peer as tp; "
      "c, raw = tp.load_model_config(sys.argv[2]); m = tp.build_model(c, torch.device('meta')); "
      "print(repr(float(tp.flops_per_token(c, int(sys.argv[3]), tp.matmul_parameters(m, c.get('expert_share', "
      "1.0))))))";
  // Qwen3 and Mixtral are transformers' own classes in the peer (TRANSFORMERS_FAMILIES).
  const bool transformers = harness::run_shell(python + " -c 'import transformers' 2>/dev/null").first == 0;
  struct Case {
    const char* type;
    const char* size;
    int64_t seq_len;
  };
  for (const Case& k : {Case{"gpt2", "tiny", 64}, Case{"gpt2", "124M", 1024}, Case{"llama", "tiny", 32},
                        Case{"llama", "1B", 2048}, Case{"llama", "8B", 4096}, Case{"mistral", "tiny", 32},
                        Case{"qwen3", "mini", 128}, Case{"mixtral", "mini", 128}}) {
    const std::string type = k.type;
    if (type != "gpt2" && type != "llama" && type != "mistral" && !transformers) {
      std::printf("skipped %s %s: %s has no transformers\n", k.type, k.size, python.c_str());
      continue;
    }
    const auto config = models::from_scratch_config(k.type, k.size);
    const auto path = dir.path() / (std::string(k.type) + "-" + k.size + ".json");
    std::ofstream(path) << config.dump();
    auto [code, output] = harness::run_shell(python + " -c \"" + script + "\" " + peers + " " + path.string() + " " +
                                             std::to_string(k.seq_len) + " 2>&1");
    ASSERT_EQ(code, 0) << k.type << " " << k.size << ": " << output;
    const double core = plan::model_flops_per_token(plan::ModelShape::of_config(config, k.size), k.seq_len);
    // The value is the last line (transformers may warn on stderr before it).
    std::string last = output.substr(0, output.find_last_not_of('\n') + 1);
    last = last.substr(last.find_last_of('\n') == std::string::npos ? 0 : last.find_last_of('\n') + 1);
    EXPECT_EQ(std::stod(last), core) << k.type << " " << k.size << ": " << output;
  }
}

}  // namespace
}  // namespace fsdpp
