#include "harness/cli/data_commands.h"

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "core/runtime/progress_line.h"
#include "harness/cli/usage_error.h"

namespace fsdpp::cli {

void DataCommands::add_to(CLI::App& app) {
  data_ = app.add_subcommand("data", "Token data for training and evaluation");
  data_->require_subcommand(1);
  prepare_ = data_->add_subcommand(
      "prepare", "Tokenize .txt, .json, .jsonl and .yaml files into fsdpp token shards (core/data/TOKENS.md)");
  // Required flags are checked in check(): a missing one is then one "fsdpp: error:" line.
  prepare_->add_option("--input", options_.input, "Input file or directory (walked recursively) (required)");
  prepare_->add_option("--output", options_.output_dir,
                       "Output directory: train_NNNNNN.tok, eval_NNNNNN.tok, manifest.json (required)");
  prepare_->add_option("--tokenizer", options_.tokenizer,
                       "tokenizer.json, or a folder with tokenizer.json, vocab.json + merges.txt or encoder.json + "
                       "vocab.bpe (required)");
  prepare_->add_option("--json-key", options_.json_keys,
                       "Only text under this JSON/YAML key (repeatable; default: every string)");
  prepare_->add_option("--start-idx", options_.start_idx, "First document of the slice (counting from 0)")
      ->check(CLI::NonNegativeNumber);
  prepare_->add_option("--end-idx", end_idx_, "End of the slice, exclusive (default: all documents)")
      ->check(CLI::NonNegativeNumber);
  prepare_->add_option("--eval-fraction", options_.eval_fraction, "Fraction of documents for the eval split, in [0, 1)")
      ->check(CLI::Range(0.0, 1.0));
  prepare_->add_option("--shard-tokens", options_.shard_tokens, "Most tokens per shard file")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  prepare_->add_option("--workers", options_.workers, "Tokenizer threads (0: one per core)")
      ->check(CLI::Range(0, 1024));
}

bool DataCommands::parsed() const { return prepare_ != nullptr && prepare_->parsed(); }

void DataCommands::check() {
  for (const auto& [flag, value] : {std::pair<const char*, const std::filesystem::path*>{"--input", &options_.input},
                                    {"--output", &options_.output_dir},
                                    {"--tokenizer", &options_.tokenizer}})
    if (value->empty()) throw UsageError(std::string("data prepare: ") + flag + " is required");
}

int DataCommands::run(const std::vector<std::string>& /*argv*/) {
  if (end_idx_ >= 0) options_.end_idx = end_idx_;
  if (!std::filesystem::exists(options_.input))
    throw UsageError(options_.input.string() +
                     ": no such file or directory (expected a file or a directory of "
                     "documents for --input)");
  data::PrepareResult r;
  {
    // On stderr: one line in place on a terminal, else a line per tenth of the documents.
    runtime::ProgressLine progress("data prepare", "documents");
    try {
      r = data::prepare_data(options_, [&](const data::PrepareProgress& p) {
        char detail[64];
        std::snprintf(detail, sizeof(detail), "%lld tokens  %.0f tokens/s", static_cast<long long>(p.tokens_done),
                      p.seconds > 0 ? static_cast<double>(p.tokens_done) / p.seconds : 0.0);
        progress.update(p.documents_done, p.documents_total, p.seconds, detail);
      });
    } catch (const std::invalid_argument& e) {  // its options or an input document were refused
      throw UsageError(e.what());
    }
  }
  if (!r.tiny_documents.empty()) {  // one line, naming the first such file
    const auto& t = r.tiny_documents.front();
    const std::string key = t.longest_key.empty() ? "KEY" : t.longest_key;
    std::string more;
    if (r.tiny_documents.size() > 1) more = " (" + std::to_string(r.tiny_documents.size() - 1) + " more files alike)";
    std::fprintf(stderr,
                 "data prepare: note: %s yields %lld documents, %lld of them under %lld bytes (mean %.0f bytes): every "
                 "string value is a document; --json-key %s keeps only the text under \"%s\"",
                 t.file.string().c_str(), static_cast<long long>(t.documents), static_cast<long long>(t.tiny),
                 static_cast<long long>(data::kTinyDocumentBytes), t.tiny_mean_bytes, key.c_str(), key.c_str());
    if (!t.longest_key.empty()) std::fprintf(stderr, " (its strings: mean %.0f bytes)", t.longest_key_mean_bytes);
    std::fprintf(stderr, "%s\n", more.c_str());
  }
  std::printf(
      "prepared %lld documents: train %lld tokens in %zu shards (%lld documents), eval %lld tokens in %zu "
      "shards (%lld documents), %lld files skipped -> %s\n",
      static_cast<long long>(r.documents), static_cast<long long>(r.train_tokens), r.train_shards.size(),
      static_cast<long long>(r.train_documents), static_cast<long long>(r.eval_tokens), r.eval_shards.size(),
      static_cast<long long>(r.eval_documents), static_cast<long long>(r.skipped_files),
      options_.output_dir.string().c_str());
  return 0;
}

}  // namespace fsdpp::cli
