// Deferred initialisation, the models' side: a model built under nn::DeferredInit holds
// meta tensors of the right shapes (ties, requires_grad and buffers kept) and never more
// than one part's weights; init_rows makes any rows of a from-scratch init bitwise as
// init_from_scratch does; PretrainedRows reads any rows of a checkpoint as load_pretrained
// loads them, touching only those rows.
#include "core/nn/deferred_init.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/io/safetensors.h"
#include "core/models/falcon.h"
#include "core/models/gpt2.h"
#include "core/models/hf_checkpoint.h"
#include "core/models/llama.h"
#include "core/models/opt.h"
#include "core/models/phi.h"
#include "core/models/presets.h"
#include "core/models/tiny_transformer.h"
#include "harness/testing/safetensors_edit.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::models {
namespace {

using harness::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

// The tiny preset of each family, plus the variants with other parts: OPT with
// project_in/out and post-LayerNorm (as OPT-350M), Llama with a tied head.
nlohmann::json config_for(const std::string& family) {
  if (family == "opt_projected") {
    OptConfig c;
    c.vocab_size = 67, c.hidden_size = 16, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.ffn_dim = 24;
    c.max_position_embeddings = 16, c.word_embed_proj_dim = 8, c.do_layer_norm_before = false;
    return c.to_json();
  }
  if (family == "llama_tied") {
    auto config = from_scratch_config("llama", "tiny");
    config["tie_word_embeddings"] = true;
    return config;
  }
  if (family == "gemma2" || family == "gemma3_text") {  // no from-scratch presets: a tiny config.json
    auto config = from_scratch_config("llama", "tiny");
    config["model_type"] = family;
    config["hidden_activation"] = "gelu_pytorch_tanh";
    for (const auto* key : {"hidden_act", "mlp_bias"}) config.erase(key);
    config["sliding_window"] = 3;
    return config;
  }
  return from_scratch_config(family, "tiny");
}

CausalLm build_deferred(const nlohmann::json& config) {
  nn::DeferredInit deferred;
  return build_causal_lm(config, "deferred");
}

// For each parameter name, the first name of the same tensor object: the tie structure.
std::map<std::string, std::string> ties_of(const torch::nn::Module& module) {
  std::unordered_map<const c10::TensorImpl*, std::string> first;
  std::map<std::string, std::string> ties;
  for (const auto& item : module.named_parameters(true))
    ties[item.key()] = first.emplace(item.value().unsafeGetTensorImpl(), item.key()).first->second;
  return ties;
}

// Each tensor object once, under its first name.
std::vector<std::pair<std::string, at::Tensor>> unique_parameters(const torch::nn::Module& module) {
  std::unordered_set<const c10::TensorImpl*> seen;
  std::vector<std::pair<std::string, at::Tensor>> unique;
  for (const auto& item : module.named_parameters(true))
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) unique.emplace_back(item.key(), item.value());
  return unique;
}

// Row ranges that split `rows` unevenly in three (some possibly empty), last first.
std::vector<std::pair<int64_t, int64_t>> uneven_chunks(int64_t rows) {
  const int64_t a = rows / 5, b = rows / 2 + 1 > rows ? rows : rows / 2 + 1;
  return {{b, rows}, {0, a}, {a, b}};
}

std::vector<int64_t> row_shape(const std::vector<int64_t>& shape, int64_t rows) {
  std::vector<int64_t> s = {rows};
  if (shape.size() >= 2) s.insert(s.end(), shape.begin() + 1, shape.end());
  return s;
}

// A parameter as rows: a 0-d or 1-d one counts its elements as rows.
at::Tensor as_rows(const at::Tensor& p) { return p.dim() == 0 ? p.reshape({1}) : p; }

// ---- building under DeferredInit ---------------------------------------------------------

class DeferredBuild : public ::testing::TestWithParam<std::string> {};

TEST_P(DeferredBuild, LeavesMetaParametersOfTheSameShapesWithTiesGradFlagsAndRealBuffers) {
  const auto config = config_for(GetParam());
  auto normal = build_causal_lm(config, "normal");
  auto deferred = build_deferred(config);
  EXPECT_FALSE(nn::deferred_init_active());
  auto expected = normal.module->named_parameters(true), actual = deferred.module->named_parameters(true);
  ASSERT_EQ(actual.keys(), expected.keys());
  for (const auto& item : actual) {
    const auto& p = item.value();
    EXPECT_TRUE(p.is_meta()) << item.key();
    EXPECT_EQ(p.sizes(), expected[item.key()].sizes()) << item.key();
    EXPECT_EQ(p.scalar_type(), expected[item.key()].scalar_type()) << item.key();
    EXPECT_TRUE(p.requires_grad()) << item.key();
  }
  EXPECT_EQ(ties_of(*deferred.module), ties_of(*normal.module));
  auto expected_buffers = normal.module->named_buffers(true);
  EXPECT_EQ(deferred.module->named_buffers(true).keys(), expected_buffers.keys());
  for (const auto& item : deferred.module->named_buffers(true)) {
    EXPECT_FALSE(item.value().is_meta()) << item.key();
    EXPECT_TRUE(torch::equal(item.value(), expected_buffers[item.key()])) << item.key();
  }
  // The rotary frequencies are not a parameter: they stay real.
  auto llama = std::dynamic_pointer_cast<LlamaForCausalLMImpl>(deferred.module);
  const std::string family = GetParam();
  if (auto phi = std::dynamic_pointer_cast<PhiForCausalLMImpl>(deferred.module)) {
    auto reference = std::dynamic_pointer_cast<PhiForCausalLMImpl>(normal.module);
    EXPECT_FALSE(phi->model->rotary->inv_freq().is_meta());
    EXPECT_TRUE(torch::equal(phi->model->rotary->inv_freq(), reference->model->rotary->inv_freq()));
    return;
  }
  if (auto falcon = std::dynamic_pointer_cast<FalconForCausalLMImpl>(deferred.module)) {
    auto reference = std::dynamic_pointer_cast<FalconForCausalLMImpl>(normal.module);
    EXPECT_FALSE(falcon->transformer->rotary->inv_freq().is_meta());
    EXPECT_TRUE(torch::equal(falcon->transformer->rotary->inv_freq(), reference->transformer->rotary->inv_freq()));
    return;
  }
  EXPECT_EQ(llama != nullptr, family != "gpt2" && family.rfind("opt", 0) != 0) << family;
  if (llama) {
    auto reference = std::dynamic_pointer_cast<LlamaForCausalLMImpl>(normal.module);
    const auto& inv_freq = llama->model->rotary->inv_freq();
    EXPECT_FALSE(inv_freq.is_meta());
    EXPECT_TRUE(torch::equal(inv_freq, reference->model->rotary->inv_freq()));
    EXPECT_EQ(llama->model->local_rotary != nullptr, family == "gemma3_text") << family;
    if (llama->model->local_rotary) {
      EXPECT_TRUE(torch::equal(llama->model->local_rotary->inv_freq(), reference->model->local_rotary->inv_freq()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, DeferredBuild,
                         ::testing::Values("gpt2", "opt", "opt_projected", "llama", "llama_tied", "mistral", "qwen2",
                                           "qwen3", "gemma2", "gemma3_text", "phi3", "phi", "mixtral", "qwen3_moe",
                                           "falcon"));

TEST(DeferredBuild, TiedHeadsAreTheEmbeddingsTensorObject) {
  auto gpt2 = build_deferred(config_for("gpt2"));
  auto p = gpt2.module->named_parameters(true);
  EXPECT_EQ(p["lm_head.weight"].unsafeGetTensorImpl(), p["transformer.wte.weight"].unsafeGetTensorImpl());
  auto opt = build_deferred(config_for("opt_projected"));
  auto q = opt.module->named_parameters(true);
  EXPECT_EQ(q["lm_head.weight"].unsafeGetTensorImpl(), q["model.decoder.embed_tokens.weight"].unsafeGetTensorImpl());
}

TEST(DeferredBuild, TinyTransformerToo) {
  TinyTransformer normal{TinyTransformerConfig{}};
  nn::DeferredInit deferred;
  TinyTransformer net{TinyTransformerConfig{}};
  for (const auto& item : net->named_parameters(true)) {
    EXPECT_TRUE(item.value().is_meta()) << item.key();
    EXPECT_EQ(item.value().sizes(), normal->named_parameters(true)[item.key()].sizes()) << item.key();
  }
  EXPECT_EQ(net->head_weight.unsafeGetTensorImpl(), net->wte->weight.unsafeGetTensorImpl());
}

TEST(DeferredBuild, OutsideADeferredInitReleaseDoesNothingAndScopesNest) {
  torch::nn::Linear linear(3, 4);
  nn::release_to_meta(*linear);
  EXPECT_FALSE(linear->weight.is_meta());
  {
    nn::DeferredInit outer;
    { nn::DeferredInit inner; }
    EXPECT_TRUE(nn::deferred_init_active());
    nn::release_to_meta(*linear);
  }
  EXPECT_FALSE(nn::deferred_init_active());
  EXPECT_TRUE(linear->weight.is_meta());
  EXPECT_TRUE(linear->named_parameters()["weight"].is_meta());  // the module's own entry: same object
}

TEST(SetDataAcrossDevices, MovesAParameterOffTheMetaDeviceAndItTrains) {
  torch::nn::Linear linear(3, 2);
  {
    nn::DeferredInit deferred;
    nn::release_to_meta(*linear);
  }
  // LibTorch's own set_data refuses this (meta and CPU tensors have other dispatch keys).
  EXPECT_THROW(linear->weight.set_data(torch::ones({2, 3})), c10::Error);
  for (auto& p : linear->parameters()) nn::set_data_across_devices(p, torch::ones(p.sizes()));
  EXPECT_TRUE(linear->weight.device().is_cpu());
  EXPECT_TRUE(linear->weight.requires_grad());
  linear(torch::ones({5, 3})).sum().backward();
  EXPECT_TRUE(torch::equal(linear->weight.grad(), torch::full({2, 3}, 5.0f)));
  EXPECT_TRUE(torch::equal(linear->bias.grad(), torch::full({2}, 5.0f)));
}

// ---- peak memory of a deferred build ------------------------------------------------------

int64_t status_bytes(const std::string& key) {  // a /proc/self/status field ("VmRSS:") in bytes
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  return -1;
}

// Runs `body` in a forked child and returns what it returns (-1 if it throws). The parent
// stays single-threaded in LibTorch (test_main), so the child may use more threads.
int64_t in_child(const std::function<int64_t()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    int64_t result = -1;
    try {
      result = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    std::fflush(stdout);  // _exit does not
    (void)!::write(fds[1], &result, sizeof result);
    ::_exit(0);
  }
  ::close(fds[1]);
  int64_t result = -1;
  if (::read(fds[0], &result, sizeof result) != sizeof result) result = -1;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return result;
}

// The peak RSS growth of `body` in a child, in bytes: the child's VmHWM starts at its RSS at
// the fork, and it first hands the heap memory that earlier tests freed back to the system
// (malloc_trim), or reusing that memory would not show.
int64_t peak_rss_growth_in_child(const std::function<void()>& body) {
  return in_child([&] {
    ::malloc_trim(0);
    const int64_t before = status_bytes("VmRSS:");
    body();
    return status_bytes("VmHWM:") - before;
  });
}

int64_t parameter_bytes(const CausalLm& lm) {
  int64_t bytes = 0;
  for (const auto& [name, p] : unique_parameters(*lm.module)) bytes += p.numel() * p.element_size();
  return bytes;
}

class DeferredBuildMemory : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

// The largest part is the token embedding (Llama 125M: 32000 x 768, 22% of the model; GPT-2
// 124M: 50257 x 768, 31%), so the peak is that part plus allocator slack: under 40%.
TEST_P(DeferredBuildMemory, PeaksAtOnePartNotTheWholeModel) {
  const auto [family, size] = GetParam();
  const auto config = from_scratch_config(family, size);
  const auto shapes = build_deferred(config);
  const int64_t model_bytes = parameter_bytes(shapes);
  int64_t largest_part = 0;
  for (const auto& [name, p] : unique_parameters(*shapes.module))
    if (name.find("embed_tokens") != std::string::npos || name.find("wte") != std::string::npos)
      largest_part = p.numel() * 4;
  ASSERT_GE(model_bytes, 400'000'000);  // >= 100 M fp32 parameters
  const int64_t deferred = peak_rss_growth_in_child([&] { build_deferred(config); });
  const int64_t full = peak_rss_growth_in_child([&] { build_causal_lm(config, "full"); });
  ASSERT_GT(deferred, 0);
  const auto model_mb = static_cast<double>(model_bytes) / 1e6, part_mb = static_cast<double>(largest_part) / 1e6,
             deferred_mb = static_cast<double>(deferred) / 1e6, full_mb = static_cast<double>(full) / 1e6;
  std::printf(
      "[memory] %s %s: %.0f MB of parameters (embedding %.0f MB); peak RSS growth while building: "
      "deferred %.0f MB (%.1f%%), full %.0f MB (%.1f%%)\n",
      family.c_str(), size.c_str(), model_mb, part_mb, deferred_mb, 100.0 * deferred_mb / model_mb, full_mb,
      100.0 * full_mb / model_mb);
  RecordProperty("deferred_peak_mb", std::to_string(deferred_mb));
  RecordProperty("full_peak_mb", std::to_string(full_mb));
  EXPECT_LT(deferred_mb, 0.4 * model_mb);
  EXPECT_LT(deferred, largest_part + 32'000'000) << "more than one part at a time";
  EXPECT_GT(full, 0.9 * model_bytes) << "the measurement must see a full build";
}

INSTANTIATE_TEST_SUITE_P(Presets, DeferredBuildMemory,
                         ::testing::Values(std::pair<std::string, std::string>{"llama", "125M"},
                                           std::pair<std::string, std::string>{"gpt2", "124M"}),
                         [](const auto& info) { return info.param.first + "_" + info.param.second; });

// ---- init_rows ---------------------------------------------------------------------------

class InitRows : public ::testing::TestWithParam<std::string> {};

TEST_P(InitRows, AnySplitOfTheRowsInAnyOrderEqualsInitFromScratchBitwise) {
  auto lm = build_causal_lm(config_for(GetParam()), "tiny");
  init_from_scratch(lm, 42);
  for (const auto& [name, p] : unique_parameters(*lm.module)) {
    const auto shape = p.sizes().vec();
    auto rows = as_rows(p.detach());
    std::vector<at::Tensor> pieces(3);
    const auto chunks = uneven_chunks(rows.size(0));
    for (size_t i = 0; i < chunks.size(); ++i) {  // the last rows first
      auto [first, end] = chunks[i];
      pieces[i] = at::empty(row_shape(shape, end - first));
      init_rows(name, shape, 42, first, pieces[i]);
    }
    EXPECT_TRUE(torch::equal(torch::cat({pieces[1], pieces[2], pieces[0]}), rows)) << name;
    // And two pieces, the second made first: cut at every row of a tensor of up to 64 rows,
    // near both ends and in the middle of a taller one (an embedding has 50257).
    const int64_t dim0 = rows.size(0);
    std::set<int64_t> cuts = {1, 2, dim0 / 3, dim0 / 2, dim0 - 2, dim0 - 1};
    for (int64_t cut = 1; cut < dim0 && dim0 <= 64; ++cut) cuts.insert(cut);
    for (const int64_t cut : cuts) {
      if (cut < 1 || cut >= dim0) continue;
      auto tail = at::empty(row_shape(shape, rows.size(0) - cut)), head = at::empty(row_shape(shape, cut));
      init_rows(name, shape, 42, cut, tail);
      init_rows(name, shape, 42, 0, head);
      EXPECT_TRUE(torch::equal(torch::cat({head, tail}), rows)) << name << " cut at row " << cut;
    }
  }
}

TEST_P(InitRows, MatricesAreNormalBiasesZeroNormsOne) {
  auto lm = build_causal_lm(config_for(GetParam()), "tiny");
  init_from_scratch(lm, 3);
  for (const auto& [name, p] : unique_parameters(*lm.module)) {
    if (p.dim() >= 2) {
      EXPECT_NEAR(p.std().item<double>(), 0.02, 0.006) << name;
      EXPECT_NEAR(p.mean().item<double>(), 0.0, 0.006) << name;
    } else if (name.size() > 4 && name.substr(name.size() - 4) == "bias") {
      EXPECT_TRUE(torch::equal(p, torch::zeros_like(p))) << name;
    } else {
      EXPECT_TRUE(torch::equal(p, torch::ones_like(p))) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, InitRows, ::testing::Values("gpt2", "opt", "opt_projected", "llama", "llama_tied"));

TEST(InitRows, ValuesDependOnSeedNameAndRowOnly) {
  const std::vector<int64_t> shape = {10, 32};
  auto rows = [&](const std::string& name, uint64_t seed, int64_t first, int64_t count) {
    auto out = at::empty({count, 32});
    init_rows(name, shape, seed, first, out);
    return out;
  };
  auto base = rows("a.weight", 1, 0, 10);
  EXPECT_TRUE(torch::equal(rows("a.weight", 1, 0, 10), base));
  EXPECT_TRUE(torch::equal(rows("a.weight", 1, 4, 3), base.narrow(0, 4, 3)));
  EXPECT_FALSE(torch::equal(rows("a.weight", 2, 0, 10), base));
  EXPECT_FALSE(torch::equal(rows("b.weight", 1, 0, 10), base));
  for (int64_t r = 1; r < 10; ++r) EXPECT_FALSE(torch::equal(base[r], base[0])) << r;
  // The same name in a model of another shape keeps its rows (a row depends on its own width only).
  auto taller = at::empty({3, 32});
  init_rows("a.weight", {100, 32}, 1, 0, taller);
  EXPECT_TRUE(torch::equal(taller, base.narrow(0, 0, 3)));
}

// A tensor large enough to be split over the intra-op threads (4 x 4M values) gets the
// bits one thread makes, for any thread count (each row has its own stream).
TEST(InitRows, ALargeTensorSplitOverThreadsHasTheBitsOfOneThread) {
  const std::vector<int64_t> shape = {2051, 8192};  // rows not a multiple of the thread count
  const int before = at::get_num_threads();
  auto with_threads = [&](int threads) {
    at::set_num_threads(threads);
    auto out = at::empty({shape[0], shape[1]});
    init_rows("h.0.mlp.weight", shape, 9, 0, out);
    return out;
  };
  const auto serial = with_threads(1);
  for (int threads : {3, 4}) EXPECT_TRUE(torch::equal(with_threads(threads), serial)) << threads << " threads";
  at::set_num_threads(before);
  EXPECT_NEAR(serial.std().item<double>(), 0.02, 1e-4);
}

TEST(InitRows, InitFromScratchMakesATieOnceUnderItsFirstName) {
  auto lm = build_causal_lm(config_for("gpt2"), "tiny");
  init_from_scratch(lm, 5);
  auto wte = lm.module->named_parameters(true)["transformer.wte.weight"];
  auto out = at::empty(wte.sizes());
  init_rows("transformer.wte.weight", wte.sizes().vec(), 5, 0, out);
  EXPECT_TRUE(torch::equal(out, wte));
  init_rows("lm_head.weight", wte.sizes().vec(), 5, 0, out);
  EXPECT_FALSE(torch::equal(out, wte));
}

TEST(InitRows, Bf16ModelsGetTheFp32ValuesRounded) {
  auto lm = build_causal_lm(config_for("llama"), "tiny");
  auto reference = build_causal_lm(config_for("llama"), "tiny");
  lm.module->to(at::kBFloat16);
  init_from_scratch(lm, 8);
  init_from_scratch(reference, 8);
  auto expected = reference.module->named_parameters(true);
  for (const auto& item : lm.module->named_parameters(true))
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()].to(at::kBFloat16))) << item.key();
}

TEST(InitRows, RowsThatDoNotFitAreRefusedNamingTheParameter) {
  auto message = [](const std::vector<int64_t>& shape, int64_t first, at::Tensor out) -> std::string {
    try {
      init_rows("h.0.mlp.weight", shape, 1, first, out);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(message({8, 4}, 0, at::empty({2, 4}, at::kDouble)), HasSubstr("'h.0.mlp.weight' [8, 4]"));
  EXPECT_THAT(message({8, 4}, 0, at::empty({2, 5})), HasSubstr("[rows, 4]"));
  EXPECT_THAT(message({8, 4}, 7, at::empty({2, 4})), HasSubstr("within its 8 rows"));
  EXPECT_THAT(message({8}, 0, at::empty({2, 1})), HasSubstr("h.0.mlp.weight"));
}

TEST(InitRows, InitFromScratchOfADeferredModelSaysWhatToDoInstead) {
  auto lm = build_deferred(config_for("gpt2"));
  try {
    init_from_scratch(lm, 1);
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'transformer.wte.weight' is on the meta device"));
  }
}

// Not a pass/fail on speed: prints the time to initialise GPT-2 124M, and checks a slice.
TEST(InitRows, InitialisingA124MModelIsTimedAndAgreesWithItsRows) {
  auto lm = build_causal_lm(from_scratch_config("gpt2", "124M"), "124M");
  const auto start = std::chrono::steady_clock::now();
  init_from_scratch(lm, 77);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[speed] init_from_scratch of GPT-2 124M (%.0f M parameters): %.2f s\n",
              static_cast<double>(parameter_bytes(lm)) / 4e6, seconds);
  RecordProperty("init_124m_s", std::to_string(seconds));
  auto wte = lm.module->named_parameters(true)["transformer.wte.weight"];
  auto slice = at::empty({7, 768});
  init_rows("transformer.wte.weight", wte.sizes().vec(), 77, 50000, slice);
  EXPECT_TRUE(torch::equal(slice, wte.narrow(0, 50000, 7)));
}

// ---- PretrainedRows ----------------------------------------------------------------------

CausalLm random_lm(const std::string& family) {
  torch::manual_seed(21);
  auto lm = build_causal_lm(config_for(family), family);
  torch::NoGradGuard no_grad;
  for (auto& p : lm.module->parameters()) p.copy_(torch::randn(p.sizes()));
  return lm;
}

// Every parameter name of `expected` (ties under each of their names), read in uneven
// chunks into `dtype`, equals the parameter bitwise.
void expect_rows_equal(const PretrainedRows& rows, const CausalLm& expected, at::ScalarType dtype) {
  for (const auto& item : expected.module->named_parameters(true)) {
    const auto shape = item.value().sizes().vec();
    auto full = as_rows(item.value().detach());
    for (auto [first, end] : uneven_chunks(full.size(0))) {
      auto out = at::empty(row_shape(shape, end - first), at::TensorOptions().dtype(dtype));
      rows.read(item.key(), shape, first, out);
      EXPECT_TRUE(torch::equal(out, full.narrow(0, first, end - first))) << item.key() << " from row " << first;
    }
  }
}

class PretrainedRowsRead : public ::testing::TestWithParam<std::string> {};

TEST_P(PretrainedRowsRead, RowsEqualTheLoadedModelsFromOneFileAndFromShards) {
  auto lm = random_lm(GetParam());
  TempDir single, sharded;
  save_pretrained(lm, single.path());
  save_pretrained(lm, sharded.path(), /*max_shard_bytes=*/4096);
  ASSERT_GT(io::load_checkpoint_dir(sharded.path()).shard_paths().size(), 2u);
  for (const auto* dir : {&single, &sharded}) {
    auto rows = PretrainedRows::open(dir->path());
    expect_rows_equal(rows, load_pretrained(dir->path()), at::kFloat);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PretrainedRowsRead,
                         ::testing::Values("gpt2", "opt", "opt_projected", "llama", "llama_tied"));

TEST(PretrainedRowsRead, TiedHeadIsReadUnderEitherName) {
  auto lm = random_lm("gpt2");
  TempDir dir;
  save_pretrained(lm, dir.path());
  ASSERT_FALSE(io::SafetensorsFile::open(dir.path() / "model.safetensors").contains("lm_head.weight"));
  auto rows = PretrainedRows::open(dir.path());
  auto wte = lm.module->named_parameters(true)["transformer.wte.weight"];
  auto out = at::empty({5, wte.size(1)});
  rows.read("lm_head.weight", wte.sizes().vec(), 10, out);
  EXPECT_TRUE(torch::equal(out, wte.narrow(0, 10, 5)));
}

TEST(PretrainedRowsRead, Bf16CheckpointIsConvertedAsLoadPretrainedConvertsIt) {
  auto lm = random_lm("llama");
  lm.module->to(at::kBFloat16);
  TempDir dir;
  save_pretrained(lm, dir.path());
  auto rows = PretrainedRows::open(dir.path());
  auto loaded = load_pretrained(dir.path(), at::kFloat);
  expect_rows_equal(rows, loaded, at::kFloat);
  auto embed = lm.module->named_parameters(true)["model.embed_tokens.weight"];
  auto out = at::empty({3, embed.size(1)});
  rows.read("model.embed_tokens.weight", embed.sizes().vec(), 1, out);
  EXPECT_TRUE(torch::equal(out, embed.narrow(0, 1, 3).to(at::kFloat)));
}

TEST(PretrainedRowsRead, NamesWithoutTheBaseModelPrefixAreFound) {
  auto lm = random_lm("gpt2");
  TempDir dir;
  save_pretrained(lm, dir.path());
  // As the original GPT-2 checkpoints name them: "h.0.attn.c_attn.weight".
  harness::rewrite_safetensors(dir.path() / "model.safetensors",
                               [](const std::string& name) -> std::optional<std::string> {
                                 return name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
                               });
  expect_rows_equal(PretrainedRows::open(dir.path()), lm, at::kFloat);
}

std::string read_error(const PretrainedRows& rows, const std::string& name, const std::vector<int64_t>& shape) {
  try {
    auto out = at::empty(row_shape(shape, 1));
    rows.read(name, shape, 0, out);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(PretrainedRowsRead, MissingOrMisshapenTensorsAreNamedWithTheFolder) {
  auto lm = random_lm("llama");
  TempDir dir;
  save_pretrained(lm, dir.path());
  harness::drop_tensor(dir.path() / "model.safetensors", "model.layers.1.mlp.up_proj.weight");
  auto rows = PretrainedRows::open(dir.path());
  auto missing = read_error(rows, "model.layers.1.mlp.up_proj.weight", {40, 16});
  EXPECT_THAT(missing, HasSubstr(dir.path().string()));
  EXPECT_THAT(missing, HasSubstr("no tensor 'model.layers.1.mlp.up_proj.weight'"));
  auto misshapen = read_error(rows, "model.layers.0.mlp.up_proj.weight", {48, 16});
  EXPECT_THAT(misshapen, HasSubstr(dir.path().string()));
  EXPECT_THAT(misshapen, HasSubstr("'model.layers.0.mlp.up_proj.weight' has shape [40, 16]"));
  EXPECT_EQ(read_error(rows, "model.layers.0.mlp.up_proj.weight", {40, 16}), "no error");
  auto out = at::empty({3, 16});
  EXPECT_THROW(rows.read("model.layers.0.mlp.up_proj.weight", {40, 16}, 38, out), std::invalid_argument);
}

TEST(PretrainedRowsRead, TouchesOnlyTheRequestedRowsOfTheFile) {
  Gpt2Config c;  // a 32 MiB embedding and little else
  c.vocab_size = 131072, c.n_embd = 64, c.n_layer = 1, c.n_head = 4, c.n_positions = 16;
  TempDir dir;
  save_pretrained(build_causal_lm(c.to_json(), "wide"), dir.path());
  auto rows = PretrainedRows::open(dir.path());
  auto warm = at::empty({4, 64});  // first reads page in LibTorch's own code; not counted
  rows.read("transformer.wpe.weight", {16, 64}, 0, warm);
  const int64_t before = status_bytes("RssFile:");
  auto out = at::empty({1024, 64});  // 256 KiB of the 32 MiB
  rows.read("transformer.wte.weight", {131072, 64}, 70000, out);
  const int64_t growth = status_bytes("RssFile:") - before;
  std::printf("[memory] reading 256 KiB of a 32 MiB tensor mapped %.2f MiB of the file\n",
              static_cast<double>(growth) / 1048576.0);
  EXPECT_LT(growth, 4 << 20);
}

}  // namespace
}  // namespace fsdpp::models
