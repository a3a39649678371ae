// Fuzz target: a Hugging Face config.json.
//
// Feeds the input, written as config.json in a scratch folder, to io::load_hf_config
// (core/io/hf_config.cpp), then asks it for the keys the models read with every typed
// getter, and hands the document to models::causal_lm_limits (core/models/causal_lm.cpp),
// which parses it with the family's own reader (Gpt2Config / OptConfig / LlamaConfig
// ::from_json through models::JsonReader, core/models/hf_json.cpp): what `fsdpp train
// --model`, `fsdpp generate` and load_pretrained do before building a model. No model is
// built (a config is allowed to describe a model larger than this machine).
//
// There is no reader of generation_config.json in the repository (nothing opens it), so
// this target covers config.json only.
//
// Expected: a std::exception naming the file and key. Finding: anything else (crash,
// sanitizer report such as an integer division by zero or overflow, non-std exception,
// hang, huge allocation).
#include <ATen/Parallel.h>

#include <cstdint>

#include "core/io/hf_config.h"
#include "core/models/causal_lm.h"
#include "suites/fuzz/fuzz_support.h"

namespace {

// Keys of config.json that fsdpp's models and commands read.
const char* const kKeys[] = {"vocab_size",
                             "n_positions",
                             "n_embd",
                             "n_layer",
                             "n_head",
                             "n_inner",
                             "hidden_size",
                             "num_hidden_layers",
                             "num_attention_heads",
                             "num_key_value_heads",
                             "head_dim",
                             "intermediate_size",
                             "max_position_embeddings",
                             "ffn_dim",
                             "rope_theta",
                             "rms_norm_eps",
                             "layer_norm_epsilon",
                             "tie_word_embeddings",
                             "torch_dtype",
                             "model_type",
                             "bos_token_id",
                             "eos_token_id"};

void read_config(const std::filesystem::path& dir) {
  const fsdpp::io::HfConfig config = fsdpp::io::load_hf_config(dir);
  for (const char* key : kKeys) {
    (void)config.contains(key);
    fsdpp::fuzz::reader_may_reject([&] { (void)config.get_int(key, 0); });
    fsdpp::fuzz::reader_may_reject([&] { (void)config.get_double(key, 0.0); });
    fsdpp::fuzz::reader_may_reject([&] { (void)config.get_bool(key, false); });
    fsdpp::fuzz::reader_may_reject([&] { (void)config.get_string(key, ""); });
  }
  (void)fsdpp::models::causal_lm_limits(config.raw, config.path.string());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdpp::fuzz::write_scratch("config.json", data, size);
  fsdpp::fuzz::reader_may_reject([&] { read_config(fsdpp::fuzz::scratch_dir()); });
  return 0;
}
