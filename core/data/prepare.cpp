#include "core/data/prepare.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "core/data/data_manifest.h"
#include "core/data/token_shard.h"
#include "core/io/atomic_file.h"
#include "core/io/yaml_json.h"
#include "core/tokenizer/load.h"

namespace fsdpp::data {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;  // keeps object keys in the order written
using Clock = std::chrono::steady_clock;

enum class InputKind { kText, kJson, kJsonl, kYaml, kOther };

InputKind input_kind(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".txt") return InputKind::kText;
  if (ext == ".json") return InputKind::kJson;
  if (ext == ".jsonl") return InputKind::kJsonl;
  if (ext == ".yaml" || ext == ".yml") return InputKind::kYaml;
  return InputKind::kOther;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot read input file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Inputs {
  std::vector<fs::path> files;  // sorted by path
  int64_t skipped = 0;          // files of other types
};

// The input files: `input` itself, or every file under it (recursively) except those in
// `output_dir`, so a rerun never reads its own manifest.
Inputs list_inputs(const fs::path& input, const fs::path& output_dir) {
  if (!fs::exists(input))
    throw std::runtime_error(input.string() +
                             ": no such file or directory (expected a file or a directory of .txt, "
                             ".json, .jsonl, .yaml or .yml files)");
  Inputs out;
  if (!fs::is_directory(input)) {
    if (input_kind(input) == InputKind::kOther)
      throw std::runtime_error(input.string() +
                               ": unsupported input type (expected .txt, .json, .jsonl, .yaml or .yml)");
    out.files.push_back(input);
    return out;
  }
  if (fs::exists(output_dir) && fs::equivalent(input, output_dir))
    throw std::invalid_argument(output_dir.string() +
                                ": the output directory is the input directory (expected "
                                "another directory, or a subdirectory of the input, which is not read)");
  for (auto it = fs::recursive_directory_iterator(input); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_directory() && fs::exists(output_dir) && fs::equivalent(it->path(), output_dir)) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    if (input_kind(it->path()) == InputKind::kOther)
      ++out.skipped;
    else
      out.files.push_back(it->path());
  }
  std::sort(out.files.begin(), out.files.end());
  return out;
}

// The documents of one file, each with the key of the object member it was the value of
// (the innermost; "" for a string outside any object).
struct FileDocuments {
  std::vector<std::string> texts;
  std::vector<std::string> keys;
};

// Appends the non-empty strings of `v` in document order: all of them, or (`keys` not
// empty) those anywhere below an object member whose key is in `keys`. Numbers,
// booleans and nulls are not text and are skipped. `key`: the member `v` is the value of.
void collect_strings(const Json& v, const std::set<std::string>& keys, bool selected, const std::string& key,
                     FileDocuments& out) {
  if (v.is_string()) {
    if (selected && !v.get_ref<const std::string&>().empty()) {
      out.texts.push_back(v.get<std::string>());
      out.keys.push_back(key);
    }
  } else if (v.is_array()) {
    for (const auto& item : v) collect_strings(item, keys, selected, key, out);
  } else if (v.is_object()) {
    for (const auto& member : v.items())
      collect_strings(member.value(), keys, selected || keys.count(member.key()) > 0, member.key(), out);
  }
}

// The documents of one input file, in order (prepare.h lists the rules per type).
FileDocuments file_documents(const fs::path& path, const std::set<std::string>& keys) {
  std::string text = read_file(path);
  FileDocuments docs;
  const bool all = keys.empty();
  switch (input_kind(path)) {
    case InputKind::kText:
      if (!text.empty()) {
        docs.texts.push_back(std::move(text));
        docs.keys.emplace_back();
      }
      break;
    case InputKind::kJson: collect_strings(io::parse_json_text<Json>(text, path.string()), keys, all, "", docs); break;
    case InputKind::kJsonl: {
      std::istringstream lines(text);
      int64_t number = 0;
      for (std::string line; std::getline(lines, line);) {
        ++number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        collect_strings(io::parse_json_text<Json>(line, path.string() + ":" + std::to_string(number)), keys, all, "",
                        docs);
      }
      break;
    }
    case InputKind::kYaml:
      // Core-schema resolution (yaml_json.h): a plain 42 / true / null is not text,
      // every other scalar (yes, 1.2.3, quoted "42") is a document.
      collect_strings(io::yaml_documents_to_json<Json>(text, path.string()), keys, all, "", docs);
      break;
    case InputKind::kOther: break;
  }
  return docs;
}

// The TinyDocuments note for a structured file read without json_keys, if its documents
// are many and mostly tiny (prepare.h).
std::optional<TinyDocuments> tiny_documents(const fs::path& path, const FileDocuments& docs) {
  const auto n = static_cast<int64_t>(docs.texts.size());
  if (n < kTinyDocumentsMin) return std::nullopt;
  TinyDocuments note;
  note.file = path;
  note.documents = n;
  int64_t tiny_bytes = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_key;  // key -> (strings, bytes)
  for (int64_t i = 0; i < n; ++i) {
    const auto bytes = static_cast<int64_t>(docs.texts[i].size());
    if (bytes < kTinyDocumentBytes) {
      ++note.tiny;
      tiny_bytes += bytes;
    }
    auto& [count, total] = by_key[docs.keys[i]];
    ++count;
    total += bytes;
  }
  if (note.tiny * 2 < n) return std::nullopt;
  note.tiny_mean_bytes = static_cast<double>(tiny_bytes) / static_cast<double>(note.tiny);
  for (const auto& [key, stats] : by_key) {
    const double mean = static_cast<double>(stats.second) / static_cast<double>(stats.first);
    if (!key.empty() && mean > note.longest_key_mean_bytes) {
      note.longest_key = key;
      note.longest_key_mean_bytes = mean;
    }
  }
  return note;
}

// One split's tokens, cut into shard files of shard_tokens tokens as they fill.
class ShardWriter {
 public:
  ShardWriter(fs::path dir, std::string split, int64_t shard_tokens, TokenDtype dtype)
      : dir_(std::move(dir)),
        split_(std::move(split)),
        shard_tokens_(static_cast<size_t>(shard_tokens)),
        dtype_(dtype) {}

  void add_document(const std::vector<int32_t>& tokens) {
    ++documents_;
    ++pending_documents_;  // counted in the shard where the document starts
    for (size_t i = 0; i < tokens.size();) {
      const size_t take = std::min(tokens.size() - i, shard_tokens_ - buffer_.size());
      const auto first = tokens.begin() + static_cast<std::ptrdiff_t>(i);
      buffer_.insert(buffer_.end(), first, first + static_cast<std::ptrdiff_t>(take));
      i += take;
      if (buffer_.size() == shard_tokens_) flush();
    }
  }
  void finish() {
    if (!buffer_.empty()) flush();
  }

  int64_t documents() const { return documents_; }
  int64_t tokens() const { return tokens_; }
  const std::vector<ShardEntry>& shards() const { return shards_; }

 private:
  void flush() {
    char name[32];
    std::snprintf(name, sizeof(name), "%s_%06zu.tok", split_.c_str(), shards_.size());
    write_token_shard(dir_ / name, buffer_, pending_documents_, dtype_);
    shards_.push_back({name, static_cast<int64_t>(buffer_.size()), pending_documents_});
    tokens_ += static_cast<int64_t>(buffer_.size());
    buffer_.clear();
    pending_documents_ = 0;
  }

  fs::path dir_;
  std::string split_;
  size_t shard_tokens_;
  TokenDtype dtype_;
  std::vector<int32_t> buffer_;
  int64_t pending_documents_ = 0, documents_ = 0, tokens_ = 0;
  std::vector<ShardEntry> shards_;
};

// Tokenizes docs[begin, end) into out[i - begin] ([separator] + encode(text)) on
// `workers` threads, calling `report` from this thread about every 100 ms meanwhile.
void tokenize_batch(const tokenizer::BpeTokenizer& tok, int32_t separator, const std::vector<std::string>& docs,
                    size_t begin, size_t end, int workers, std::vector<std::vector<int32_t>>& out,
                    std::atomic<int64_t>& documents_done, std::atomic<int64_t>& tokens_done,
                    const std::function<void()>& report) {
  out.assign(end - begin, {});
  std::atomic<size_t> next{begin};
  std::mutex mu;
  std::condition_variable cv;
  int running = workers;
  std::exception_ptr error;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&] {
      try {
        for (size_t i; (i = next.fetch_add(1)) < end;) {
          auto& ids = out[i - begin];
          ids.push_back(separator);
          const auto text_ids = tok.encode(docs[i]);
          ids.insert(ids.end(), text_ids.begin(), text_ids.end());
          tokens_done += static_cast<int64_t>(ids.size());
          ++documents_done;
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next = end;
      }
      std::lock_guard<std::mutex> lock(mu);
      --running;
      cv.notify_one();
    });
  {
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return running == 0; })) {
      lock.unlock();
      report();
      lock.lock();
    }
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

// Removes train_NNNNNN.tok / eval_NNNNNN.tok files of an earlier run that this run did
// not write, so the directory matches its manifest.
void remove_stale_shards(const fs::path& dir, const std::vector<ShardEntry>& train,
                         const std::vector<ShardEntry>& eval) {
  static const std::regex kShardName("(train|eval)_[0-9]{6}\\.tok");
  std::set<std::string> keep;
  for (const auto* list : {&train, &eval})
    for (const auto& s : *list) keep.insert(s.file);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(name, kShardName) && keep.count(name) == 0)
      fs::remove(entry.path());
  }
}

void check_options(const PrepareOptions& o) {
  auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
  if (!(o.eval_fraction >= 0 && o.eval_fraction < 1))
    fail("eval_fraction " + std::to_string(o.eval_fraction) + ": expected a fraction in [0, 1) (some data must train)");
  if (o.start_idx < 0) fail("start_idx " + std::to_string(o.start_idx) + ": expected >= 0");
  if (o.end_idx && *o.end_idx <= o.start_idx)
    fail("end_idx " + std::to_string(*o.end_idx) + ": expected > start_idx " + std::to_string(o.start_idx));
  if (o.shard_tokens < 1) fail("shard_tokens " + std::to_string(o.shard_tokens) + ": expected >= 1");
  if (o.workers < 0) fail("workers " + std::to_string(o.workers) + ": expected >= 0 (0: one per core)");
  if (o.output_dir.empty()) fail("output directory: expected a path");
}

}  // namespace

PrepareResult prepare_data(const PrepareOptions& options, const std::function<void(const PrepareProgress&)>& progress) {
  check_options(options);
  const auto tok = tokenizer::load_tokenizer(options.tokenizer);
  const auto separator = tokenizer::document_separator_id(tok);
  if (!separator)
    throw std::runtime_error(
        options.tokenizer.string() +
        ": the vocabulary has none of <|endoftext|>, <s>, <|begin_of_text|>, <bos> (expected a document "
        "separator)");

  // 1. Documents, in order; only the selected slice is kept.
  const Inputs inputs = list_inputs(options.input, options.output_dir);
  const std::set<std::string> keys(options.json_keys.begin(), options.json_keys.end());
  std::vector<std::string> docs;
  int64_t in_input = 0;
  std::vector<TinyDocuments> tiny;
  for (const auto& file : inputs.files) {
    auto file_docs = file_documents(file, keys);
    if (keys.empty() && input_kind(file) != InputKind::kText)
      if (auto note = tiny_documents(file, file_docs)) tiny.push_back(std::move(*note));
    for (auto& doc : file_docs.texts) {
      if (in_input >= options.start_idx && (!options.end_idx || in_input < *options.end_idx))
        docs.push_back(std::move(doc));
      ++in_input;
    }
  }
  if (in_input == 0)
    throw std::runtime_error(options.input.string() +
                             ": no documents (expected non-empty text in .txt, .json, .jsonl, .yaml or .yml files)");
  if (options.end_idx && *options.end_idx > in_input)
    throw std::invalid_argument("end_idx " + std::to_string(*options.end_idx) + " is beyond the " +
                                std::to_string(in_input) + " documents of " + options.input.string());
  if (docs.empty())
    throw std::invalid_argument("start_idx " + std::to_string(options.start_idx) + " selects no documents (" +
                                options.input.string() + " holds " + std::to_string(in_input) + ")");

  // 2. Tokenize in batches (bounded memory for tokens), writing shards in document order.
  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  if (ec) throw std::runtime_error(options.output_dir.string() + ": cannot create output directory: " + ec.message());
  fs::remove(options.output_dir / "manifest.json", ec);  // no manifest while the shards change
  const TokenDtype dtype = token_dtype_for_vocab(static_cast<int64_t>(tok.vocab_size()));
  ShardWriter train(options.output_dir, "train", options.shard_tokens, dtype);
  ShardWriter eval(options.output_dir, "eval", options.shard_tokens, dtype);
  const int workers =
      std::max(1, options.workers > 0 ? options.workers : static_cast<int>(std::thread::hardware_concurrency()));

  const auto started = Clock::now();
  std::atomic<int64_t> documents_done{0}, tokens_done{0};
  auto report = [&] {
    if (progress)
      progress({documents_done.load(), static_cast<int64_t>(docs.size()), tokens_done.load(),
                std::chrono::duration<double>(Clock::now() - started).count()});
  };
  constexpr size_t kBatchBytes = size_t{16} << 20;
  std::vector<std::vector<int32_t>> batch_tokens;
  for (size_t begin = 0; begin < docs.size();) {
    size_t end = begin, bytes = 0;
    while (end < docs.size() && (end == begin || bytes < kBatchBytes)) bytes += docs[end++].size();
    const int threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(workers), end - begin));
    tokenize_batch(tok, *separator, docs, begin, end, threads, batch_tokens, documents_done, tokens_done, report);
    for (size_t i = begin; i < end; ++i) {
      // Evenly spread eval documents: i goes to eval iff floor((i+1)f) > floor(if).
      const double f = options.eval_fraction, x = static_cast<double>(i);
      (std::floor((x + 1) * f) > std::floor(x * f) ? eval : train).add_document(batch_tokens[i - begin]);
      std::string().swap(docs[i]);  // free the text as soon as it is tokenized
    }
    report();
    begin = end;
  }
  train.finish();
  eval.finish();
  remove_stale_shards(options.output_dir, train.shards(), eval.shards());

  // 3. The manifest, last: its presence means the shards are complete.
  DataManifest m;
  m.source = {{"input", options.input.string()},
              {"files", static_cast<int64_t>(inputs.files.size())},
              {"skipped_files", inputs.skipped}};
  m.tokenizer = {{"path", options.tokenizer.string()},
                 {"vocab_size", static_cast<int64_t>(tok.vocab_size())},
                 {"document_separator", {{"id", *separator}, {"token", tok.token(*separator)}}}};
  m.options = {{"json_keys", options.json_keys},
               {"start_idx", options.start_idx},
               {"end_idx", options.end_idx ? Json(*options.end_idx) : Json(nullptr)},
               {"eval_fraction", options.eval_fraction},
               {"shard_tokens", options.shard_tokens}};
  m.dtype = to_string(dtype);
  m.documents_in_input = in_input;
  m.documents_selected = static_cast<int64_t>(docs.size());
  m.train_documents = train.documents();
  m.eval_documents = eval.documents();
  m.train_tokens = train.tokens();
  m.eval_tokens = eval.tokens();
  m.train_shards = train.shards();
  m.eval_shards = eval.shards();
  io::write_file_atomic(options.output_dir / "manifest.json", m.to_json().dump(2) + "\n");

  PrepareResult r;
  r.documents = m.documents_selected;
  r.train_documents = m.train_documents;
  r.eval_documents = m.eval_documents;
  r.skipped_files = inputs.skipped;
  r.tiny_documents = std::move(tiny);
  r.train_tokens = m.train_tokens;
  r.eval_tokens = m.eval_tokens;
  for (const auto& s : m.train_shards) r.train_shards.push_back(options.output_dir / s.file);
  for (const auto& s : m.eval_shards) r.eval_shards.push_back(options.output_dir / s.file);
  return r;
}

}  // namespace fsdpp::data
