// Hugging Face folders: every family round-trips through safetensors exactly (one file
// and shards with an index), and each kind of bad folder fails with one clear error.
#include "core/models/hf_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>

#include "core/io/safetensors.h"
#include "core/models/gpt2.h"
#include "core/models/llama.h"
#include "core/models/opt.h"
#include "harness/testing/safetensors_edit.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::models {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

using harness::TempDir;

nlohmann::json tiny_config(const std::string& family) {
  if (family == "gpt2") {
    Gpt2Config c;
    c.vocab_size = 67, c.n_positions = 16, c.n_embd = 12, c.n_layer = 2, c.n_head = 3;
    return c.to_json();
  }
  if (family == "opt") {
    OptConfig c;
    c.vocab_size = 67, c.hidden_size = 16, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.ffn_dim = 24;
    c.max_position_embeddings = 16, c.word_embed_proj_dim = 8, c.do_layer_norm_before = false;
    return c.to_json();
  }
  if (family == "gemma2" || family == "gemma3") {  // tied (Gemma's default) and untied, windows of 3
    nlohmann::json j = {{"model_type", family == "gemma2" ? "gemma2" : "gemma3_text"},
                        {"vocab_size", 67},
                        {"hidden_size", 16},
                        {"intermediate_size", 24},
                        {"num_hidden_layers", 3},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"head_dim", 6},
                        {"sliding_window", 3},
                        {"tie_word_embeddings", family == "gemma2"}};
    return LlamaConfig::from_json(j, family).to_json();
  }
  if (family == "phi3" || family == "phi" || family == "mixtral" || family == "qwen3_moe" || family == "falcon")
    return from_scratch_config(family, "tiny");
  auto c = llama_preset("tiny");
  c.tie_word_embeddings = family == "llama_tied" || family == "qwen3_tied";
  if (family == "llama_mlp_bias") c.mlp_bias = true;
  if (family == "qwen2") c.model_type = "qwen2", c.qkv_bias = true;
  if (family == "qwen3_tied") c.model_type = "qwen3", c.qk_norm = true, c.head_dim = 6;
  return c.to_json();
}

CausalLm random_model(const std::string& family) {
  torch::manual_seed(21);
  auto lm = build_causal_lm(tiny_config(family), family);
  torch::NoGradGuard no_grad;
  for (auto& p : lm.module->parameters()) p.copy_(torch::randn(p.sizes()));
  return lm;
}

void expect_same_model(const CausalLm& a, const CausalLm& b) {
  auto pa = a.module->named_parameters(true), pb = b.module->named_parameters(true);
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    ASSERT_TRUE(pb.contains(item.key())) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  }
  auto tokens = torch::randint(0, a.vocab_size, {2, 7});
  torch::NoGradGuard no_grad;
  // The reloaded weights sit in the file's mapping, at its 8-byte offsets; CPU BLAS may round
  // a matmul differently for operands at another address alignment. The same bits, moved to
  // fresh allocations as a's are, must give a's logits bit for bit.
  for (auto& p : b.module->parameters()) p.set_data(p.detach().clone());
  EXPECT_TRUE(torch::equal(a.logits(tokens), b.logits(tokens)));
}

class RoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTrip, OneFileAndShardsReloadBitForBit) {
  auto lm = random_model(GetParam());
  TempDir single, sharded;
  save_pretrained(lm, single.path());
  EXPECT_TRUE(fs::exists(single.path() / "model.safetensors"));
  expect_same_model(lm, load_pretrained(single.path()));
  save_pretrained(lm, sharded.path(), /*max_shard_bytes=*/4096);
  EXPECT_TRUE(fs::exists(sharded.path() / "model.safetensors.index.json"));
  EXPECT_GT(io::load_checkpoint_dir(sharded.path()).shard_paths().size(), 2u);
  expect_same_model(lm, load_pretrained(sharded.path()));
}

INSTANTIATE_TEST_SUITE_P(Families, RoundTrip,
                         ::testing::Values("gpt2", "opt", "llama", "llama_tied", "llama_mlp_bias", "qwen2",
                                           "qwen3_tied", "gemma2", "gemma3", "phi3", "phi", "mixtral", "qwen3_moe",
                                           "falcon"));

TEST(RoundTrip, TiedWeightsAreStoredOnceUnderTheirFirstName) {
  auto lm = random_model("gpt2");
  TempDir dir;
  save_pretrained(lm, dir.path());
  auto file = io::SafetensorsFile::open(dir.path() / "model.safetensors");
  EXPECT_TRUE(file.contains("transformer.wte.weight"));
  EXPECT_FALSE(file.contains("lm_head.weight"));
}

TEST(RoundTrip, Bf16LoadingConvertsEveryParameter) {
  auto lm = random_model("llama");
  TempDir dir;
  save_pretrained(lm, dir.path());
  auto half = load_pretrained(dir.path(), at::kBFloat16);
  for (auto& p : half.module->parameters()) EXPECT_EQ(p.scalar_type(), at::kBFloat16);
  auto original = lm.module->named_parameters(true);
  for (auto& item : half.module->named_parameters(true))
    EXPECT_TRUE(torch::equal(item.value(), original[item.key()].to(at::kBFloat16))) << item.key();
}

// ---- bad folders: each names the file and the problem ----
std::string load_error(const fs::path& dir) {
  try {
    load_pretrained(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(BadFolders, MissingConfig) {
  TempDir dir;
  EXPECT_THAT(load_error(dir.path()), HasSubstr((dir.path() / "config.json").string()));
}

TEST(BadFolders, InvalidConfigJson) {
  TempDir dir;
  std::ofstream(dir.path() / "config.json") << "{\"model_type\": \"llama\",";
  EXPECT_THAT(load_error(dir.path()), HasSubstr((dir.path() / "config.json").string()));
}

TEST(BadFolders, UnknownArchitecture) {
  TempDir dir;
  auto config = tiny_config("llama");
  config["model_type"] = "bloom";
  std::ofstream(dir.path() / "config.json") << config.dump();
  const auto error = load_error(dir.path());
  EXPECT_THAT(error, HasSubstr((dir.path() / "config.json").string()));
  EXPECT_THAT(error, HasSubstr("unknown model_type 'bloom'"));
}

TEST(BadFolders, MissingTensor) {
  auto lm = random_model("llama");
  TempDir dir;
  save_pretrained(lm, dir.path());
  harness::drop_tensor(dir.path() / "model.safetensors", "model.layers.1.mlp.up_proj.weight");
  auto error = load_error(dir.path());
  EXPECT_THAT(error, HasSubstr("no tensor 'model.layers.1.mlp.up_proj.weight'"));
  EXPECT_THAT(error, HasSubstr("model.safetensors"));
}

TEST(BadFolders, TensorWithTheWrongShape) {
  auto lm = random_model("llama");
  TempDir dir;
  save_pretrained(lm, dir.path());
  auto config = tiny_config("llama");
  config["intermediate_size"] = 48;  // the stored MLP weights are 40 wide
  std::ofstream(dir.path() / "config.json") << config.dump();
  EXPECT_THAT(load_error(dir.path()), HasSubstr("has shape [40, 16], the config implies [48, 16]"));
}

// Issue 41: a tensor that no parameter reads is refused, naming the file and the tensor (an
// mlp_bias Llama's MLP biases went unread and it evaluated 8e-4 off transformers), except the
// buffers transformers recomputes itself and a tied weight's second copy holding the same values.
TEST(BadFolders, ATensorNoParameterReadsIsRefusedNamingTheFileAndTheTensor) {
  auto lm = random_model("llama_mlp_bias");
  TempDir dir;
  save_pretrained(lm, dir.path());
  auto config = tiny_config("llama_mlp_bias");
  config["mlp_bias"] = false;
  std::ofstream(dir.path() / "config.json") << config.dump();
  const auto error = load_error(dir.path());
  EXPECT_THAT(error, HasSubstr((dir.path() / "model.safetensors").string() + ": tensor 'model.layers."));
  EXPECT_THAT(error, HasSubstr("_proj.bias' is read by no parameter of the llama model"));
  EXPECT_THROW(PretrainedRows::open(dir.path()), std::runtime_error);
}

TEST(BadFolders, RecomputedBuffersAndAnEqualTiedCopyAreReadDeliberately) {
  auto lm = random_model("llama_tied");
  TempDir dir;
  save_pretrained(lm, dir.path());
  const auto file = dir.path() / "model.safetensors";
  const auto embedding = io::SafetensorsFile::open(file).copy_tensor("model.embed_tokens.weight");
  harness::add_tensor(file, "model.layers.0.self_attn.rotary_emb.inv_freq", torch::ones({2}));
  harness::add_tensor(file, "lm_head.weight", embedding);  // transformers 4.x saved both names at times
  expect_same_model(lm, load_pretrained(dir.path()));
  harness::drop_tensor(file, "lm_head.weight");
  harness::add_tensor(file, "lm_head.weight", embedding + 1);
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr("tensor 'lm_head.weight' differs from 'model.embed_tokens.weight', which the config makes the "
                        "same parameter"));
}

TEST(BadFolders, HeaderThatLiesAboutOffsets) {
  auto lm = random_model("llama");
  TempDir dir;
  save_pretrained(lm, dir.path());
  // Rewrite the header so that the first tensor claims one byte where its shape needs more.
  auto path = dir.path() / "model.safetensors";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, ' ');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  auto j = nlohmann::json::parse(header);
  for (auto& [name, entry] : j.items())
    if (name != "__metadata__") {
      entry["data_offsets"] = {0, 1};
      break;
    }
  std::string lied = j.dump();
  lied.resize(header_len, ' ');
  ASSERT_LE(j.dump().size(), header_len);
  f.seekp(8);
  f.write(lied.data(), static_cast<std::streamsize>(lied.size()));
  f.close();
  const auto error = load_error(dir.path());
  EXPECT_THAT(error, HasSubstr((dir.path() / "model.safetensors").string()));
  EXPECT_THAT(error, HasSubstr("data_offsets"));
}

}  // namespace
}  // namespace fsdpp::models

namespace fsdpp::models {
namespace {

int64_t status_kb(const char* field) {  // from /proc/self/status, e.g. "VmHWM:"
  std::ifstream in("/proc/self/status");
  std::string key;
  int64_t value = 0;
  while (in >> key) {
    if (key == field) {
      in >> value;
      return value;
    }
    in.ignore(1 << 12, '\n');
  }
  return -1;
}

TEST(LargeModels, LoadingAGigabyteModelNeedsItsSizeOnceNotTwice) {
  auto space = fs::space(fs::temp_directory_path());
  ASSERT_GT(space.available, uint64_t{3} << 30) << "needs 3 GiB free in " << fs::temp_directory_path();
  TempDir dir;
  LlamaConfig c = llama_preset("tiny");
  c.vocab_size = 32000, c.hidden_size = 1024, c.intermediate_size = 2816, c.num_hidden_layers = 20;
  c.num_attention_heads = 16, c.num_key_value_heads = 16;
  const double file_mb = static_cast<double>(c.parameter_count()) * 4 / 1e6;
  ASSERT_GT(file_mb, 1000);
  // Write and load in separate processes so that each one's peak RSS is its own.
  auto run = [](const std::function<void()>& body) {
    pid_t pid = ::fork();
    if (pid == 0) {
      try {
        body();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        ::_exit(1);
      }
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(run([&] { save_pretrained(build_causal_lm(c.to_json(), "big"), dir.path()); }), 0);
  auto report = dir.path() / "peak.txt";
  ASSERT_EQ(run([&] {
              int64_t before = status_kb("VmRSS:");
              auto lm = load_pretrained(dir.path());
              torch::NoGradGuard no_grad;
              auto logits = lm.logits(torch::randint(0, 32000, {1, 4}));  // touches every weight
              std::ofstream(report) << (status_kb("VmHWM:") - before) / 1000.0 << " " << logits.sum().item<double>();
            }),
            0);
  double peak_mb = 0;
  std::ifstream(report) >> peak_mb;
  RecordProperty("file_mb", std::to_string(file_mb));
  RecordProperty("peak_rss_growth_mb", std::to_string(peak_mb));
  std::printf("[memory] %.0f MB model: peak RSS growth while loading and running it %.0f MB (%.2fx)\n", file_mb,
              peak_mb, peak_mb / file_mb);
  EXPECT_LT(peak_mb, 1.5 * file_mb);
  EXPECT_GT(peak_mb, 0.5 * file_mb) << "the forward pass must have touched the weights";
}

}  // namespace
}  // namespace fsdpp::models
