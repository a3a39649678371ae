#include "harness/cli/data_commands.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "harness/cli/usage_error.h"

namespace fsdpp::cli {

namespace {

// Progress on stderr: one line rewritten in place on a terminal, else a line per 10%
// (logs and CI keep every line, so they get few).
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(::fileno(stderr)) != 0) {}

  void operator()(const data::PrepareProgress& p) {
    const double rate = p.seconds > 0 ? static_cast<double>(p.tokens_done) / p.seconds : 0;
    if (tty_) {
      std::fprintf(stderr, "\rdata prepare: %lld/%lld documents  %lld tokens  %.0f tokens/s   ",
                   static_cast<long long>(p.documents_done), static_cast<long long>(p.documents_total),
                   static_cast<long long>(p.tokens_done), rate);
      std::fflush(stderr);
      wrote_line_ = true;
      return;
    }
    const int64_t decile = p.documents_total > 0 ? p.documents_done * 10 / p.documents_total : 10;
    if (decile <= last_decile_) return;
    last_decile_ = decile;
    std::fprintf(stderr, "data prepare: %3lld%%  %lld/%lld documents  %lld tokens  %.0f tokens/s\n",
                 static_cast<long long>(decile * 10), static_cast<long long>(p.documents_done),
                 static_cast<long long>(p.documents_total), static_cast<long long>(p.tokens_done), rate);
  }

  ~ProgressPrinter() {
    if (wrote_line_) std::fputc('\n', stderr);
  }

 private:
  bool tty_;
  bool wrote_line_ = false;
  int64_t last_decile_ = 0;  // first line at 10%
};

}  // namespace

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
    ProgressPrinter printer;
    try {
      r = data::prepare_data(options_, [&](const data::PrepareProgress& p) { printer(p); });
    } catch (const std::invalid_argument& e) {  // its options or an input document were refused
      throw UsageError(e.what());
    }
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
