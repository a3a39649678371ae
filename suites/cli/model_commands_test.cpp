// `fsdpp eval` and `fsdpp generate` on Hugging Face folders written by the project itself,
// and one clear error line with a non-zero exit for every kind of bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/data/token_file.h"
#include "core/io/safetensors.h"
#include "core/models/generate.h"
#include "core/models/gpt2.h"
#include "core/models/hf_checkpoint.h"
#include "core/models/llama.h"
#include "core/tokenizer/load.h"
#include "harness/testing/assets.h"
#include "harness/testing/safetensors_edit.h"
#include "harness/testing/temp_dir.h"
#include "suites/cli/fsdpp_binary.h"

namespace fsdpp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using harness::TempDir;

using harness::run_shell;

// A random tiny Llama saved as an HF folder in `dir`, and 100 tokens as an llm.c file.
void write_llama_folder(const fs::path& dir) {
  torch::manual_seed(5);
  auto lm = models::build_causal_lm(models::llama_preset("tiny").to_json(), "tiny");
  models::save_pretrained(lm, dir);
  data::write_llmc_tokens(dir / "tokens.bin", torch::randint(0, 97, {100}));
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// --json is stdout's one line whatever else the command prints (its progress goes to stderr,
// which run_shell would merge: stderr goes to a file here).
TEST(EvalCommand, PrintsTheLossOfTheLoadedModelAsJson) {
  TempDir dir;
  write_llama_folder(dir.path());
  const auto stderr_file = dir.path() / "stderr.txt";
  auto [code, output] =
      run_shell("(" + kFsdpp + " eval --model " + dir.path().string() + " --data " +
                (dir.path() / "tokens.bin").string() + " --seq-len 8 --json 2>" + stderr_file.string() + ")");
  ASSERT_EQ(code, 0) << output << read_text(stderr_file);
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
  auto json = nlohmann::json::parse(output);
  auto expected =
      models::evaluate(models::load_pretrained(dir.path()), data::read_token_file(dir.path() / "tokens.bin"), 8);
  EXPECT_NEAR(json["loss"].get<double>(), expected.loss, 1e-6);
  EXPECT_NEAR(json["perplexity"].get<double>(), std::exp(expected.loss), 1e-4);
  EXPECT_EQ(json["tokens"].get<int64_t>(), 12 * 8);  // 99 targets fill 12 windows of 8
}

// A long evaluation says how far it is: stderr is not a terminal here, so one line per tenth
// of the windows (as data prepare's progress), each counting the windows scored; stdout
// holds the result alone.
TEST(EvalCommand, ShowsProgressByTenthsOnStderr) {
  TempDir dir;
  write_llama_folder(dir.path());
  const auto stderr_file = dir.path() / "stderr.txt";
  auto [code, output] =
      run_shell("(" + kFsdpp + " eval --model " + dir.path().string() + " --data " +
                (dir.path() / "tokens.bin").string() + " --seq-len 8 --batch-size 1 2>" + stderr_file.string() + ")");
  const std::string progress = read_text(stderr_file);
  ASSERT_EQ(code, 0) << output << progress;
  EXPECT_THAT(output, StartsWith("loss "));
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
  // 12 windows, one per forward pass: tenth t is first reached after ceil(12 t / 10) windows.
  std::vector<std::string> lines;
  std::istringstream in(progress);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 10U) << progress;
  for (int t = 1; t <= 10; ++t) {
    char expected[64];
    std::snprintf(expected, sizeof(expected), "eval: %3d%%  %d/12 windows  ", t * 10, (12 * t + 9) / 10);
    EXPECT_THAT(lines[t - 1], StartsWith(expected)) << progress;
    EXPECT_THAT(lines[t - 1], HasSubstr(" tokens/s")) << progress;
  }
}

TEST(GenerateCommand, ContinuesAPromptWithTheFoldersGpt2Tokenizer) {
  TempDir dir;
  models::Gpt2Config c;
  c.n_embd = 16, c.n_layer = 1, c.n_head = 2, c.n_positions = 32;  // GPT-2's vocabulary, tiny body
  torch::manual_seed(1);
  models::save_pretrained(models::build_causal_lm(c.to_json(), "gpt2"), dir.path());
  fs::copy_file(harness::test_asset("gpt2/encoder.json"), dir.path() / "vocab.json");
  fs::copy_file(harness::test_asset("gpt2/vocab.bpe"), dir.path() / "merges.txt");
  auto [code, output] = run_shell(kFsdpp + " generate --model " + dir.path().string() +
                                  " --prompt 'Hello world' --max-new-tokens 4 --temperature 0");
  EXPECT_EQ(code, 0) << output;
  EXPECT_THAT(output, StartsWith("Hello world"));
  // The continuation itself: the folder's model and tokenizer, greedy, as models::generate gives it.
  const auto tok = tokenizer::load_tokenizer(dir.path());
  const auto prompt = tok.encode("Hello world");
  models::SamplingOptions greedy;
  greedy.max_new_tokens = 4;
  greedy.temperature = 0;
  const auto ids =
      models::generate(models::load_pretrained(dir.path()), std::vector<int64_t>(prompt.begin(), prompt.end()), greedy);
  ASSERT_GT(ids.size(), prompt.size()) << "no token was generated";
  EXPECT_EQ(output, tok.decode(std::vector<int32_t>(ids.begin(), ids.end())) + "\n");
}

TEST(ModelSizeCommand, PrintsThePresetsExactCounts) {
  auto [code, output] = run_shell(kFsdpp + " model-size 7B 70B");
  EXPECT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr(" 6738415616 parameters"));
  EXPECT_THAT(output, HasSubstr(" 68976648192 parameters"));
  EXPECT_NE(run_shell(kFsdpp + " model-size 5B").first, 0);
}

// --config-dir writes each preset's HF config.json, which reads back as the same model (its
// exact count), and an unwritable folder is one line naming the flag.
TEST(ModelSizeCommand, WritesEachPresetsConfigThatReadsBackAsTheSameModel) {
  TempDir dir;
  auto [code, output] = run_shell(kFsdpp + " model-size 3B 7B --config-dir " + (dir.path() / "configs").string());
  ASSERT_EQ(code, 0) << output;
  for (const auto& [name, count] : {std::pair<std::string, int64_t>{"3B", 3212749824}, {"7B", 6738415616}}) {
    std::ifstream in(dir.path() / "configs" / name / "config.json");
    ASSERT_TRUE(in) << name;
    auto config = models::LlamaConfig::from_json(nlohmann::json::parse(in), name);
    EXPECT_EQ(config.parameter_count(), count) << name;
  }
  auto [bad_code, bad_output] =
      run_shell("(" + kFsdpp + " model-size tiny --config-dir /proc/no-such-dir 2>&1 1>/dev/null)");  // stderr
  EXPECT_EQ(bad_code, 2);
  EXPECT_THAT(bad_output, StartsWith("fsdpp: error: --config-dir /proc/no-such-dir: cannot create"));
  EXPECT_EQ(std::count(bad_output.begin(), bad_output.end(), '\n'), 1) << bad_output;  // one line
}

// ---- each bad input: exit 2 (bad input), one line "fsdpp: error: ..." naming the culprit ----
struct BadCase {
  std::string name;
  std::function<void(const fs::path&)> spoil;  // applied to a valid folder
  std::string command;                         // "eval" or "generate"
  std::string expected;                        // in the error line
};

std::vector<BadCase> bad_cases() {
  return {
      {"MissingConfig", [](const fs::path& d) { fs::remove(d / "config.json"); }, "eval", "config.json"},
      {"InvalidConfig", [](const fs::path& d) { std::ofstream(d / "config.json") << "{ not json"; }, "eval",
       "config.json"},
      {"UnknownArchitecture",
       [](const fs::path& d) {
         auto j = models::llama_preset("tiny").to_json();
         j["model_type"] = "bloom";
         std::ofstream(d / "config.json") << j.dump();
       },
       "eval", "unknown model_type 'bloom'"},
      {"MissingTensor", [](const fs::path& d) { harness::drop_tensor(d / "model.safetensors", "model.norm.weight"); },
       "eval", "no tensor 'model.norm.weight'"},
      {"WrongShape",
       [](const fs::path& d) {
         auto j = models::llama_preset("tiny").to_json();
         j["vocab_size"] = 98;
         std::ofstream(d / "config.json") << j.dump();
       },
       "eval", "the config implies [98, 16]"},
      // Issue 41: nothing defaulted silently. A tensor no parameter reads (the MLP biases of an
      // mlp_bias Llama were, and it evaluated 8e-4 off transformers), a config key fsdpp does not
      // know, and a Qwen2 config whose layers from max_window_layers on slide.
      {"TensorNoParameterReads",
       [](const fs::path& d) {
         harness::add_tensor(d / "model.safetensors", "model.layers.0.mlp.up_proj.bias", torch::zeros({40}));
       },
       "eval", "tensor 'model.layers.0.mlp.up_proj.bias' is read by no parameter"},
      {"UnknownConfigKey",
       [](const fs::path& d) {
         auto j = models::llama_preset("tiny").to_json();
         j["quantization_config"] = {{"quant_method", "bitsandbytes"}};
         std::ofstream(d / "config.json") << j.dump();
       },
       "eval", "key 'quantization_config'"},
      {"QwenSlidingWindow",
       [](const fs::path& d) {
         auto c = models::llama_preset("tiny");
         c.model_type = "qwen2";
         auto j = c.to_json();
         j["use_sliding_window"] = false;  // transformers would slide layer 1 through a window of None
         j["layer_types"] = {"full_attention", "sliding_attention"};
         std::ofstream(d / "config.json") << j.dump();
       },
       "eval", "layer 1 is a sliding_attention layer, but the config gives no window"},
      {"HeaderLyingAboutOffsets",
       [](const fs::path& d) {
         std::fstream f(d / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
         uint64_t huge = uint64_t{1} << 40;  // header length far beyond the file
         f.write(reinterpret_cast<const char*>(&huge), 8);
       },
       "eval", "model.safetensors"},
      {"TokenizerMissing", [](const fs::path&) {}, "generate", "no tokenizer"},
      {"BadTokenFile", [](const fs::path& d) { std::ofstream(d / "tokens.bin") << "not tokens"; }, "eval",
       "tokens.bin: not a token file"},
  };
}

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, GivesOneClearErrorLineAndANonZeroExit) {
  TempDir dir;
  write_llama_folder(dir.path());
  GetParam().spoil(dir.path());
  std::string args = GetParam().command == "eval" ? " eval --model " + dir.path().string() + " --data " +
                                                        (dir.path() / "tokens.bin").string() + " --seq-len 8"
                                                  : " generate --model " + dir.path().string() + " --prompt hi";
  auto [code, output] = run_shell(kFsdpp + args);
  EXPECT_EQ(code, 2) << output;
  EXPECT_THAT(output, StartsWith("fsdpp: error: "));
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
  EXPECT_THAT(output, HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(Cases, BadInput, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fsdpp
