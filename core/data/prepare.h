// `fsdpp data prepare`: raw text -> token shards (format: core/data/TOKENS.md).
//
// Documents, in order: the input files sorted by path (a directory is walked
// recursively), and within a file:
//   .txt          the whole file is one document
//   .json         every string value, recursively (arrays in order, objects in key
//                 order as written), each a document; with json_keys, only string values
//                 found under those keys
//   .jsonl        each line a JSON value, treated like a .json file
//   .yaml/.yml    every string scalar, like .json (all YAML documents of the file); a
//                 string is any scalar that is not a plain number, boolean or null under
//                 YAML 1.2's core schema (io/yaml_json.h): `42` is skipped, `"42"`, `yes`
//                 and `1.2.3` are documents
// Other files are skipped (and counted); so is the output directory if it lies inside
// the input. Empty documents are dropped before counting.
// Without json_keys, a .json/.jsonl/.yaml file whose documents are many and mostly tiny
// (metadata strings, every leaf of a record) is reported in PrepareResult::tiny_documents,
// so that the caller can suggest json_keys: at least kTinyDocumentsMin documents, at least
// half of them under kTinyDocumentBytes bytes.
// Document index i counts from 0 over that order; [start_idx, end_idx) selects a slice.
// Each document is tokenized on its own and prefixed with the tokenizer's document
// separator (<|endoftext|> for GPT-2 vocabularies, else <s>, as llm.c and Llama do).
// Document i of the slice goes to the eval split iff floor((i+1)*f) > floor(i*f) for
// f = eval_fraction (evenly spread; none for f = 0).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fsdpp::data {

struct PrepareOptions {
  std::filesystem::path input;         // file or directory
  std::filesystem::path output_dir;    // receives train_NNNNNN.tok, eval_NNNNNN.tok, manifest.json
  std::filesystem::path tokenizer;     // see tokenizer::load_tokenizer
  std::vector<std::string> json_keys;  // empty: every string value
  int64_t start_idx = 0;
  std::optional<int64_t> end_idx;      // exclusive; none: to the end
  double eval_fraction = 0;            // [0, 1)
  int64_t shard_tokens = 100'000'000;  // most tokens per shard file
  int workers = 0;                     // tokenizer threads; 0: hardware concurrency
};

struct PrepareProgress {
  int64_t documents_done = 0;
  int64_t documents_total = 0;
  int64_t tokens_done = 0;
  double seconds = 0;  // since tokenizing began (after the inputs were read)
};

inline constexpr int64_t kTinyDocumentsMin = 8;
inline constexpr int64_t kTinyDocumentBytes = 64;

// A structured file that yielded many tiny documents (see above).
struct TinyDocuments {
  std::filesystem::path file;
  int64_t documents = 0;       // all of the file's documents
  int64_t tiny = 0;            // those under kTinyDocumentBytes
  double tiny_mean_bytes = 0;  // their mean size
  // The object key whose strings are longest on average ("" if no string is under a key),
  // the one --json-key would most likely keep.
  std::string longest_key;
  double longest_key_mean_bytes = 0;
};

struct PrepareResult {
  int64_t documents = 0, train_documents = 0, eval_documents = 0, skipped_files = 0;
  std::vector<TinyDocuments> tiny_documents;  // in file order
  int64_t train_tokens = 0, eval_tokens = 0;
  std::vector<std::filesystem::path> train_shards, eval_shards;
};

// Throws std::runtime_error / std::invalid_argument naming the file or option at fault
// (unreadable input, invalid JSON/YAML with its file, no documents in the slice, a slice
// outside the documents, an eval fraction outside [0, 1)). Shards and the manifest are
// written atomically, the manifest last; shard files of an earlier run into the same
// directory that this run does not rewrite are removed. `progress` (if set) is called
// from the calling thread, about every 100 ms and after each batch of documents. The
// selected documents' text is held in memory while tokenizing.
PrepareResult prepare_data(const PrepareOptions& options,
                           const std::function<void(const PrepareProgress&)>& progress = {});

}  // namespace fsdpp::data
