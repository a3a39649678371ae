#include "harness/cli/model_commands.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "core/data/token_dataset.h"
#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"
#include "core/models/generate.h"
#include "core/models/hf_checkpoint.h"
#include "core/models/llama.h"
#include "core/models/presets.h"
#include "core/runtime/device.h"
#include "core/runtime/progress_line.h"
#include "core/runtime/stopwatch.h"
#include "core/tokenizer/load.h"
#include "harness/cli/usage_error.h"

namespace fsdpp::cli {

namespace {

at::ScalarType parse_dtype(const std::string& name) { return runtime::parse_compute_dtype(name, "--dtype"); }

}  // namespace

void ModelCommands::add_to(CLI::App& app) {
  generate_ = app.add_subcommand("generate", "Continue a prompt with a Hugging Face model folder");
  generate_->add_option("--model", model_dir_, "Model folder (config.json, safetensors, tokenizer)")->required();
  generate_->add_option("--prompt", prompt_, "Text to continue")->required();
  generate_->add_option("--max-new-tokens", max_new_tokens_, "Tokens to add")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  generate_->add_option("--temperature", temperature_, "0: greedy")->check(CLI::Range(0.0, 100.0));
  generate_->add_option("--top-k", top_k_, "Keep the k most likely tokens (0: off)")->check(CLI::NonNegativeNumber);
  generate_->add_option("--top-p", top_p_, "Nucleus sampling mass (1: off)")->check(CLI::Range(1e-6, 1.0));
  generate_->add_option("--seed", seed_, "Sampling seed");
  generate_->add_option("--dtype", dtype_, "fp32, bf16 or fp16")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));

  eval_ = app.add_subcommand("eval", "Mean next-token loss and perplexity of a model folder on token data");
  eval_->add_option("--model", model_dir_, "Model folder (config.json, safetensors)")->required();
  eval_
      ->add_option("--data", data_path_,
                   "Token data: a .tok or llm.c .bin file, a directory of them, a pattern (out/eval_*.tok), or a "
                   "comma-separated list")
      ->required();
  eval_->add_option("--seq-len", seq_len_, "Window length T")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  eval_->add_option("--batch-size", batch_size_, "Windows per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  eval_->add_option("--dtype", dtype_, "fp32, bf16 or fp16")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  eval_->add_flag("--json", json_, "Print {\"loss\", \"perplexity\", \"tokens\"} as JSON");
  eval_->add_option("--logits-out", logits_out_,
                    "Also write every window's input_ids [W,T] and fp32 logits [W,T,vocab] as one safetensors file");

  size_ = app.add_subcommand("model-size", "Exact parameter counts of the Llama-style from-scratch presets");
  size_->add_option("presets", presets_, "Preset names (default: all)")
      ->check(CLI::IsMember(models::llama_preset_names()));
  size_->add_option("--config-dir", config_dir_,
                    "Also write each preset's Hugging Face config.json as DIR/<preset>/config.json (for "
                    "transformers or harness/peers/torch_peer.py --model-config)");
}

bool ModelCommands::parsed() const {
  for (const CLI::App* command : {generate_, eval_, size_})
    if (command != nullptr && command->parsed()) return true;
  return false;
}

int ModelCommands::run(const std::vector<std::string>& /*argv*/) {
  if (generate_ != nullptr && generate_->parsed()) {
    auto tok = read_input([&] { return tokenizer::load_tokenizer(model_dir_); });
    auto lm = read_input([&] { return models::load_pretrained(model_dir_, parse_dtype(dtype_)); });
    models::SamplingOptions o;
    o.max_new_tokens = max_new_tokens_;
    o.temperature = temperature_;
    o.top_k = top_k_;
    o.top_p = top_p_;
    o.seed = seed_;
    auto ids = tok.encode(prompt_);
    std::vector<int64_t> prompt(ids.begin(), ids.end());
    auto out = models::generate(lm, prompt, o);
    std::vector<int32_t> text_ids(out.begin(), out.end());
    std::printf("%s\n", tok.decode(text_ids).c_str());
    return 0;
  }
  if (size_ != nullptr && size_->parsed()) {
    auto names = presets_.empty() ? models::llama_preset_names() : presets_;
    for (const auto& name : names) {
      auto c = models::llama_preset(name);
      std::printf("%-5s %14lld parameters  (layers %lld, hidden %lld, heads %lld, kv heads %lld, vocab %lld%s)\n",
                  name.c_str(), static_cast<long long>(c.parameter_count()),
                  static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
                  static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
                  static_cast<long long>(c.vocab_size), c.tie_word_embeddings ? ", tied" : "");
      if (!config_dir_.empty()) {
        const auto folder = std::filesystem::path(config_dir_) / name;
        std::error_code ec;
        std::filesystem::create_directories(folder, ec);
        if (ec)
          throw UsageError("--config-dir " + config_dir_ + ": cannot create " + folder.string() + ": " + ec.message());
        io::write_file_atomic(folder / "config.json", models::from_scratch_config("llama", name).dump(2) + "\n");
      }
    }
    return 0;
  }
  if (eval_ != nullptr && eval_->parsed()) {
    auto lm = read_input([&] { return models::load_pretrained(model_dir_, parse_dtype(dtype_)); });
    auto dataset = read_input([&] {
      auto d = data::TokenDataset::open(data_path_);
      d.require_window(seq_len_, "--data " + data_path_);
      if (d.max_token() >= lm.vocab_size)
        throw std::runtime_error(data_path_ + ": token " + std::to_string(d.max_token()) +
                                 " is outside the model's vocabulary of " + std::to_string(lm.vocab_size));
      return d;
    });
    // Progress on stderr (stdout keeps the result, --json its one line): in place on a
    // terminal, else a line per tenth of the windows.
    runtime::ProgressLine progress("eval", "windows");
    const auto started = runtime::SteadyClock::now();
    auto r = models::evaluate(lm, dataset.tokens(0, dataset.num_tokens()), seq_len_, batch_size_, !logits_out_.empty(),
                              [&](int64_t done, int64_t total) {
                                const double seconds = runtime::ms_since(started) / 1000;
                                char detail[64];
                                std::snprintf(detail, sizeof(detail), "%.0f tokens/s",
                                              seconds > 0 ? static_cast<double>(done * seq_len_) / seconds : 0.0);
                                progress.update(done, total, seconds, detail);
                              });
    if (!logits_out_.empty()) io::write_safetensors(logits_out_, {{"input_ids", r.input_ids}, {"logits", r.logits}});
    if (json_)
      std::printf("%s\n",
                  nlohmann::json{{"loss", r.loss}, {"perplexity", r.perplexity}, {"tokens", r.tokens}}.dump().c_str());
    else
      std::printf("loss %.6f  perplexity %.4f  tokens %lld\n", r.loss, r.perplexity, static_cast<long long>(r.tokens));
    return 0;
  }
  return -1;
}

}  // namespace fsdpp::cli
