// HF config.json: the fields every model has, typed look-ups, and errors that name the key
// and the file.
#include "core/io/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "harness/testing/temp_dir.h"

namespace fsdpp::io {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A fresh folder holding one config.json with `text`, removed afterwards.
class ConfigDir {
 public:
  explicit ConfigDir(const std::string& text) { std::ofstream(file(), std::ios::binary) << text; }
  const fs::path& dir() const { return dir_.path(); }
  fs::path file() const { return dir_ / "config.json"; }

 private:
  harness::TempDir dir_{"fsdpp-hfconfig"};
};

std::string config_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

// Abridged from a Llama-style config.json as transformers writes it.
constexpr const char* kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 32000
})";

TEST(HfConfig, LoadsModelTypeArchitecturesAndTypedValues) {
  ConfigDir dir(kLlamaConfig);
  auto config = load_hf_config(dir.dir());
  EXPECT_EQ(config.path, dir.file());
  EXPECT_EQ(config.model_type, "llama");
  EXPECT_EQ(config.architectures, std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_EQ(config.get_int("hidden_size"), 2048);
  EXPECT_EQ(config.get_int("vocab_size"), 32000);
  EXPECT_DOUBLE_EQ(config.get_double("rms_norm_eps"), 1e-5);
  EXPECT_DOUBLE_EQ(config.get_double("rope_theta"), 10000.0);  // an integer is a valid double
  EXPECT_FALSE(config.get_bool("tie_word_embeddings"));
  EXPECT_EQ(config.get_string("hidden_act"), "silu");
  EXPECT_EQ(config.raw["torch_dtype"], "bfloat16");
}

TEST(HfConfig, AcceptsThePathOfTheFileItself) {
  ConfigDir dir(kLlamaConfig);
  EXPECT_EQ(load_hf_config(dir.file()).model_type, "llama");
}

TEST(HfConfig, FallbacksApplyToAbsentAndNullKeysOnly) {
  ConfigDir dir(kLlamaConfig);
  auto config = load_hf_config(dir.dir());
  EXPECT_EQ(config.get_int("num_key_value_heads", 32), 32);
  EXPECT_FALSE(config.contains("rope_scaling"));  // null means "not set"
  EXPECT_EQ(config.get_string("rope_scaling", "none"), "none");
  EXPECT_EQ(config.get_int("hidden_size", 7), 2048);
  EXPECT_DOUBLE_EQ(config.get_double("attention_dropout", 0.0), 0.0);
  EXPECT_TRUE(config.get_bool("use_cache", true));
}

TEST(HfConfig, MissingConfigFileIsAnErrorNamingThePath) {
  ConfigDir dir(kLlamaConfig);
  fs::remove(dir.file());
  EXPECT_THAT(config_error_of([&] { load_hf_config(dir.dir()); }),
              AllOf(HasSubstr(dir.file().string()), HasSubstr("cannot open")));
}

TEST(HfConfig, InvalidJsonIsAnErrorNamingTheFileAndPosition) {
  ConfigDir dir("{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 2048,,\n}");
  EXPECT_THAT(config_error_of([&] { load_hf_config(dir.dir()); }),
              AllOf(HasSubstr(dir.file().string()), HasSubstr("invalid JSON"), HasSubstr("line 3")));
}

TEST(HfConfig, MissingModelTypeIsAnError) {
  ConfigDir dir(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 2048})");
  EXPECT_THAT(config_error_of([&] { load_hf_config(dir.dir()); }),
              AllOf(HasSubstr(dir.file().string()), HasSubstr("missing key 'model_type'")));
}

TEST(HfConfig, TopLevelThatIsNotAnObjectIsAnError) {
  ConfigDir dir(R"(["llama"])");
  EXPECT_THAT(config_error_of([&] { load_hf_config(dir.dir()); }),
              AllOf(HasSubstr(dir.file().string()), HasSubstr("expected an object")));
}

TEST(HfConfig, ArchitecturesThatAreNotAListOfStringsAreAnError) {
  ConfigDir dir(R"({"model_type": "llama", "architectures": "LlamaForCausalLM"})");
  EXPECT_THAT(config_error_of([&] { load_hf_config(dir.dir()); }),
              AllOf(HasSubstr(dir.file().string()), HasSubstr("key 'architectures' is a string"),
                    HasSubstr("expected a list of strings")));
}

TEST(HfConfig, MissingKeyIsAnErrorNamingKeyAndFile) {
  ConfigDir dir(kLlamaConfig);
  auto config = load_hf_config(dir.dir());
  EXPECT_THAT(config_error_of([&] { config.get_int("num_hidden_layers"); }),
              AllOf(HasSubstr(dir.file().string()), HasSubstr("missing key 'num_hidden_layers'")));
  EXPECT_THAT(config_error_of([&] { config.get_double("rope_scaling"); }),  // null counts as missing
              AllOf(HasSubstr(dir.file().string()), HasSubstr("missing key 'rope_scaling'")));
}

TEST(HfConfig, WrongTypeIsAnErrorNamingKeyFileAndWhatWasFound) {
  ConfigDir dir(kLlamaConfig);
  auto config = load_hf_config(dir.dir());
  EXPECT_THAT(
      config_error_of([&] { config.get_int("hidden_act"); }),
      AllOf(HasSubstr(dir.file().string()), HasSubstr("key 'hidden_act' is a string (\"silu\"), expected an integer")));
  EXPECT_THAT(config_error_of([&] { config.get_int("initializer_range"); }),  // floats are not integers
              HasSubstr("key 'initializer_range' is a float (0.02), expected an integer"));
  EXPECT_THAT(config_error_of([&] { config.get_int("initializer_range", 1); }), HasSubstr("expected an integer"));
  EXPECT_THAT(config_error_of([&] { config.get_bool("bos_token_id"); }),
              HasSubstr("key 'bos_token_id' is an integer (1), expected a boolean"));
  EXPECT_THAT(config_error_of([&] { config.get_string("architectures"); }),
              HasSubstr("key 'architectures' is an array"));
  EXPECT_THAT(config_error_of([&] { config.get_double("torch_dtype"); }), HasSubstr("expected a number"));
}

}  // namespace
}  // namespace fsdpp::io
