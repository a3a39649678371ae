#include "harness/results/results_document.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/utsname.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "core/checkpoint/sha256.h"
#include "core/io/atomic_file.h"
#include "core/io/json_depth.h"
#include "core/runtime/cuda_plugin.h"
#include "core/runtime/device.h"
#include "harness/results/json_schema.h"

#if FSDPP_WITH_CUDA
#include <cuda_runtime_api.h>  // CUDART_VERSION
#include <nccl.h>              // NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH
#endif

// The generated translation unit that holds results/schema/v1.json (harness/CMakeLists.txt).
namespace fsdpp::results::embedded {
extern const char kResultsSchemaV1[];
}

namespace fsdpp::results {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw std::runtime_error(source + ": " + what);
}

// ---- text and time ------------------------------------------------------------------

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file.string(), std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(file.string(), "read failed");
  return text.str();
}

std::string trim(std::string text) {
  const char* space = " \t\r\n";
  text.erase(0, text.find_first_not_of(space));
  text.erase(text.find_last_not_of(space) + 1);
  return text;
}

// ISO 8601 UTC, whole seconds: "2026-11-22T19:00:00Z" (iso) or "20261122T190000Z" (compact).
std::string utc_time(std::time_t t, bool compact) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, compact ? "%Y%m%dT%H%M%SZ" : "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Parses "YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)" (what Python's isoformat() and our
// writer produce) into seconds since the epoch; nullopt otherwise.
std::optional<std::time_t> parse_iso_time(const std::string& text) {
  static const std::regex form(
      R"(^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|([+-])(\d{2}):?(\d{2}))$)");
  std::smatch m;
  if (!std::regex_match(text, m, form)) return std::nullopt;
  std::tm tm{};
  tm.tm_year = std::stoi(m[1]) - 1900;
  tm.tm_mon = std::stoi(m[2]) - 1;
  tm.tm_mday = std::stoi(m[3]);
  tm.tm_hour = std::stoi(m[4]);
  tm.tm_min = std::stoi(m[5]);
  tm.tm_sec = std::stoi(m[6]);
  std::time_t t = timegm(&tm);
  if (m[9].matched) {
    const long offset_s = (std::stol(m[10]) * 60 + std::stol(m[11])) * 60;
    t -= m[9] == "+" ? offset_s : -offset_s;
  }
  return t;
}

std::string random_hex8() {
  std::random_device random;
  char text[9];
  std::snprintf(text, sizeof text, "%08x", static_cast<unsigned>(random()));
  return text;
}

bool is_lower_hex(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// ---- the machine ------------------------------------------------------------------------

json file_field(const fs::path& file, const std::string& key, char separator) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    auto at = line.find(separator, key.size());
    if (at == std::string::npos || !trim(line.substr(key.size(), at - key.size())).empty()) continue;
    std::string value = trim(line.substr(at + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    return value;
  }
  return nullptr;
}

json operating_system() {
  json pretty = file_field("/etc/os-release", "PRETTY_NAME", '=');
  if (pretty.is_string() && !pretty.get<std::string>().empty()) return pretty;
  utsname name{};
  if (uname(&name) != 0) return nullptr;
  return std::string(name.sysname) + " " + name.release;
}

json memory_bytes() {
  json total = file_field("/proc/meminfo", "MemTotal", ':');  // "25165824 kB"
  if (!total.is_string()) return nullptr;
  return static_cast<int64_t>(std::stoll(total.get<std::string>())) * 1024;
}

json host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return nullptr;
  return std::string(name);
}

std::string compiler_name() {
#if defined(__clang__)
  return __VERSION__;  // e.g. "Debian Clang 14.0.6"
#elif defined(__GNUC__)
  return "GCC " __VERSION__;  // __VERSION__ is "12.2.0"
#else
  return __VERSION__;
#endif
}

int64_t whole_gib(const json& bytes) {
  return static_cast<int64_t>(std::llround(bytes.get<double>() / double(int64_t{1} << 30)));
}

// ---- git -------------------------------------------------------------------------------

#ifndef FSDPP_RESULTS_SOURCE_DIR
#define FSDPP_RESULTS_SOURCE_DIR ""
#endif

std::string read_first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return trim(line);
}

// HEAD of the source tree this binary was built from, read from .git's files (no git
// process): a detached hash, or a branch's ref file, or its packed-refs line.
std::string source_tree_commit() {
  fs::path source(FSDPP_RESULTS_SOURCE_DIR);
  if (source.empty()) return "unknown";
  fs::path git_dir = source / ".git";
  std::error_code ec;
  if (fs::is_regular_file(git_dir, ec)) {  // a worktree: "gitdir: <path>"
    std::string line = read_first_line(git_dir);
    if (line.rfind("gitdir:", 0) != 0) return "unknown";
    git_dir = fs::path(trim(line.substr(7)));
    if (git_dir.is_relative()) git_dir = source / git_dir;
  }
  if (!fs::is_directory(git_dir, ec)) return "unknown";
  fs::path common_dir = git_dir;
  if (fs::exists(git_dir / "commondir", ec)) {
    common_dir = fs::path(read_first_line(git_dir / "commondir"));
    if (common_dir.is_relative()) common_dir = git_dir / common_dir;
  }
  std::string head = read_first_line(git_dir / "HEAD");
  if (head.rfind("ref:", 0) != 0) return head.size() == 40 && is_lower_hex(head) ? head : "unknown";
  const std::string ref = trim(head.substr(4));
  for (const auto& dir : {git_dir, common_dir}) {
    std::string hash = read_first_line(dir / ref);
    if (hash.size() == 40 && is_lower_hex(hash)) return hash;
  }
  std::ifstream packed(common_dir / "packed-refs");
  std::string line;
  while (std::getline(packed, line))
    if (line.size() > 41 && line.compare(41, std::string::npos, ref) == 0 && is_lower_hex(line.substr(0, 40)))
      return line.substr(0, 40);
  return "unknown";
}

// FSDPP_COMMIT / FSDPP_DIRTY (as CI runners set them),
// else the source tree's HEAD with dirty unknown: telling requires running git.
json git_info() {
  json git;
  const char* commit = std::getenv("FSDPP_COMMIT");
  std::string hash = commit ? trim(commit) : "";
  std::transform(hash.begin(), hash.end(), hash.begin(), [](unsigned char c) { return std::tolower(c); });
  git["commit"] = hash.size() >= 7 && hash.size() <= 40 && is_lower_hex(hash) ? hash : source_tree_commit();
  const char* dirty = std::getenv("FSDPP_DIRTY");
  if (dirty && std::string(dirty) == "1")
    git["dirty"] = true;
  else if (dirty && std::string(dirty) == "0")
    git["dirty"] = false;
  else
    git["dirty"] = nullptr;
  return git;
}

// ---- version 0 -> 1 -------------------------------------------------------------------

// Reads fields of a version 0 document, naming the JSON pointer of anything missing.
struct V0Reader {
  const std::string& source;

  const json& need(const json& object, const std::string& key, const std::string& pointer) const {
    if (!object.is_object() || !object.contains(key))
      fail(source, pointer + "/" + json_pointer_token(key) + ": missing (version 0 documents have it)");
    return object.at(key);
  }
  template <typename T>
  T get(const json& object, const std::string& key, const std::string& pointer) const {
    const json& value = need(object, key, pointer);
    try {
      return value.get<T>();
    } catch (const json::exception&) {
      fail(source, pointer + "/" + json_pointer_token(key) + ": unexpected value " + value.dump());
    }
  }
};

json metric(const json& value, const char* unit, const char* better) {
  return {{"value", value.is_number() ? value : json(nullptr)}, {"unit", unit}, {"better", better}};
}

// Adds metrics[name] from record[key] when the record has it.
void add_metric(json& metrics, const std::string& name, const json& record, const std::string& key, const char* unit,
                const char* better) {
  if (record.is_object() && record.contains(key)) metrics[name] = metric(record.at(key), unit, better);
}

json migrate_machine_v0(const json& v0) {
  auto text_or_null = [&](const char* key) {
    return v0.contains(key) && v0[key].is_string() ? v0[key] : json(nullptr);
  };
  json machine;
  machine["hostname"] = nullptr;  // version 0 did not record it
  machine["os"] = text_or_null("os");
  machine["cpu_model"] = text_or_null("cpu_model");
  machine["cpu_cores"] = v0.value("cpu_cores", json(nullptr));
  machine["memory_bytes"] = v0.value("memory_bytes", json(nullptr));
  const json gpus = v0.value("gpus", json::array());
  const json first_gpu = gpus.is_array() && !gpus.empty() ? gpus[0] : json::object();
  machine["gpu_model"] = first_gpu.value("name", json(nullptr));
  machine["gpu_count"] = v0.value("gpu_count", json(gpus.is_array() ? gpus.size() : 0));
  machine["gpu_memory_bytes"] = nullptr;
  if (first_gpu.contains("memory") && first_gpu["memory"].is_string()) {  // nvidia-smi's "81559 MiB"
    std::smatch m;
    const std::string memory = first_gpu["memory"].get<std::string>();
    // At most 12 digits: any more MiB than that is no GPU's, and would overflow the bytes.
    if (std::regex_match(memory, m, std::regex(R"(^\s*(\d{1,12})\s*MiB\s*$)")))
      machine["gpu_memory_bytes"] = std::stoll(m[1]) * (int64_t{1} << 20);
  }
  machine["driver"] = first_gpu.value("driver", json(nullptr));
  machine["cuda"] = text_or_null("cuda");
  machine["nccl"] = text_or_null("nccl");
  machine["libtorch"] = text_or_null("libtorch");
  machine["compiler"] = text_or_null("compiler");
  machine["fingerprint"] = machine_fingerprint(machine);
  return machine;
}

// The id grammar of the layout: <model>/<system>/<precision>/n<world>/pf-ac-off-det flags.
std::string cell_id(const json& config, const std::string& system_part) {
  auto flag = [&](const char* key) { return config.at(key).get<bool>() ? "1" : "0"; };
  return config.at("model_type").get<std::string>() + "-" + config.at("model_size").get<std::string>() + "/" +
         system_part + "/" + config.at("mixed_precision").get<std::string>() + "/n" +
         std::to_string(config.at("world_size").get<int64_t>()) + "/pf" + flag("prefetch") + "-ac" +
         flag("activation_checkpointing") + "-off" + flag("cpu_offload") + "-det" + flag("deterministic");
}

json step_samples(const json& record, const V0Reader& v0, const std::string& pointer) {
  json samples;
  samples["step_ms"] = {{"unit", "ms"}, {"better", "lower"}, {"values", v0.need(record, "step_ms", pointer)}};
  if (record.contains("tokens_per_s"))  // version 0 ran one repetition: one value
    samples["tokens_per_s"] = {
        {"unit", "tokens/s"}, {"better", "higher"}, {"values", json::array({record["tokens_per_s"]})}};
  return samples;
}

// One version 0 cell becomes an fsdpp cell and a pytorch_fsdp2 cell with the same config.
std::vector<json> migrate_cell_v0(const json& cell, const std::string& pointer, const V0Reader& v0) {
  const json& ours = v0.need(cell, "fsdpp", pointer);
  const json& peer = cell.contains("pytorch_fsdp2") ? cell["pytorch_fsdp2"] : json(nullptr);
  const json& v0_config = cell.contains("config") ? cell["config"] : v0.need(ours, "config", pointer + "/fsdpp");
  const std::string at = cell.contains("config") ? pointer + "/config" : pointer + "/fsdpp/config";

  json config;
  config["model_type"] = v0.get<std::string>(v0_config, "model_type", at);
  config["model_size"] = v0.get<std::string>(v0_config, "model_size", at);
  // Version 0's fsdpp records counted a tied embedding twice (results/README.md); the
  // PyTorch record's count is right, so it wins when the cell has one.
  config["parameters"] =
      peer.is_object() && peer.contains("parameters") ? peer["parameters"] : ours.value("parameters", json(nullptr));
  config["vocab_size"] = v0.get<int64_t>(v0_config, "vocab_size", at);
  config["seq_len"] = v0.get<int64_t>(v0_config, "seq_len", at);
  const auto batch = v0.get<int64_t>(v0_config, "batch_size_per_rank", at);
  const auto world = v0.get<int64_t>(v0_config, "world_size", at);
  int64_t global_batch = 0;
  if (__builtin_mul_overflow(batch, world, &global_batch))
    fail(v0.source, at + ": batch_size_per_rank " + std::to_string(batch) + " x world_size " + std::to_string(world) +
                        " overflows (expected a global batch below 2^63)");
  config["batch_per_rank"] = batch;
  config["global_batch"] = global_batch;
  config["world_size"] = world;
  config["strategy"] = v0.get<std::string>(v0_config, "strategy", at);
  config["mixed_precision"] = v0.get<std::string>(v0_config, "mixed_precision", at);
  config["prefetch"] = v0.get<bool>(v0_config, "prefetch", at);
  config["activation_checkpointing"] = v0.get<bool>(v0_config, "activation_checkpointing", at);
  config["cpu_offload"] = v0.get<bool>(v0_config, "cpu_offload", at);
  config["deterministic"] = false;  // version 0 had no deterministic mode
  config["warmup_steps"] = v0.get<int64_t>(v0_config, "warmup_steps", at);
  config["timed_steps"] = v0.get<int64_t>(v0_config, "steps", at);
  config["repetitions"] = 1;
  config["device"] = v0.get<std::string>(v0_config, "device", at).rfind("cuda", 0) == 0 ? "cuda" : "cpu";
  config["threads_per_rank"] = nullptr;

  json fsdpp_cell = {{"id", cell_id(config, "fsdp-" + config["strategy"].get<std::string>())},
                     {"system", "fsdpp"},
                     {"config", config},
                     {"status", "ok"}};
  fsdpp_cell["samples"] = step_samples(ours, v0, pointer + "/fsdpp");
  json& metrics = fsdpp_cell["metrics"] = json::object();
  add_metric(metrics, "step_ms_median", ours, "step_ms_median", "ms", "lower");
  add_metric(metrics, "step_ms_min", ours, "step_ms_min", "ms", "lower");
  add_metric(metrics, "tokens_per_s", ours, "tokens_per_s", "tokens/s", "higher");
  add_metric(metrics, "achieved_flops_per_s", ours, "achieved_flops_per_s_per_device", "FLOP/s per device", "higher");
  add_metric(metrics, "matmul_peak_flops_per_s", ours, "matmul_peak_flops_per_s", "FLOP/s", "none");
  add_metric(metrics, "mfu", cell.value("mfu", json::object()), "fsdpp", "fraction", "higher");
  const json memory = ours.value("memory_bytes", json::object());
  add_metric(metrics, "persistent_bytes_per_rank", memory, "persistent_after_setup", "bytes", "lower");
  add_metric(metrics, "peak_bytes_per_rank", memory, "peak_allocated", "bytes", "lower");
  for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce"}) {
    const json comm = ours.value("comm", json::object()).value(kind, json::object());
    add_metric(metrics, std::string("comm_bytes_per_step_") + kind, comm, "bytes_sent_per_step", "bytes", "lower");
  }
  const json ratios = cell.value("ratios", json::object());
  add_metric(metrics, "tokens_per_s_ratio_vs_pytorch_fsdp2", ratios, "tokens_per_s_fsdpp_over_pytorch", "ratio",
             "higher");
  add_metric(metrics, "peak_bytes_ratio_vs_pytorch_fsdp2", ratios, "peak_allocated_fsdpp_over_pytorch", "ratio",
             "lower");

  json peer_config = config;
  peer_config["strategy"] = "fsdp2";
  if (peer.is_object() && peer.contains("threads") && peer["threads"].is_number_integer())
    peer_config["threads_per_rank"] = peer["threads"];
  json peer_cell = {{"id", cell_id(config, "pytorch_fsdp2")},
                    {"system", "pytorch_fsdp2"},
                    {"config", peer_config},
                    {"samples", json::object()},
                    {"metrics", json::object()}};
  if (!peer.is_object()) {
    peer_cell["status"] = "unavailable";
    peer_cell["reason"] = "the version 0 document has no PyTorch FSDP2 record for this cell";
  } else if (!peer.value("available", true)) {
    peer_cell["status"] = "unavailable";
    peer_cell["reason"] = peer.value("reason", std::string("the PyTorch peer reported FSDP2 not available"));
  } else {
    peer_cell["status"] = "ok";
    peer_cell["samples"] = step_samples(peer, v0, pointer + "/pytorch_fsdp2");
    json& peer_metrics = peer_cell["metrics"];
    add_metric(peer_metrics, "step_ms_median", peer, "step_ms_median", "ms", "lower");
    add_metric(peer_metrics, "step_ms_min", peer, "step_ms_min", "ms", "lower");
    add_metric(peer_metrics, "tokens_per_s", peer, "tokens_per_s", "tokens/s", "higher");
    // Version 0 recomputed the peer's MFU with fsdpp's FLOPs formula and matmul peak.
    add_metric(peer_metrics, "mfu", cell.value("mfu", json::object()), "pytorch_fsdp2", "fraction", "higher");
    add_metric(peer_metrics, "peak_bytes_per_rank", cell, "pytorch_peak_allocated_bytes", "bytes", "lower");
    add_metric(peer_metrics, "matmul_peak_flops_per_s", peer.value("matmul_peak", json::object()), "flops_per_s",
               "FLOP/s", "none");
  }
  return {fsdpp_cell, peer_cell};
}

json migrate_v0(const json& doc, const std::string& source) {
  V0Reader v0{source};
  json out;
  out["format"] = kFormat;
  out["schema_version"] = kSchemaVersion;
  const std::string timestamp = v0.get<std::string>(doc, "timestamp", "");
  const auto when = parse_iso_time(timestamp);
  if (!when) fail(source, "/timestamp: expected an ISO 8601 time, got \"" + timestamp + "\"");
  out["timestamp"] = utc_time(*when, false);
  // Version 0 ids are UUIDs; their first 8 hex digits keep the two ids recognisably related.
  const json old_run_id = doc.value("run_id", json(nullptr));
  std::string run_hex = old_run_id.is_string() ? old_run_id.get<std::string>().substr(0, 8) : "";
  if (run_hex.size() != 8 || !is_lower_hex(run_hex)) run_hex = checkpoint::sha256_hex(old_run_id.dump()).substr(0, 8);
  out["run_id"] = utc_time(*when, true) + "-" + run_hex;
  out["migrated_from"] = {{"schema_version", 0}, {"run_id", old_run_id.is_string() ? old_run_id : json(nullptr)}};

  std::string commit = doc.value("git_commit", json(nullptr)).is_string() ? doc["git_commit"].get<std::string>() : "";
  std::transform(commit.begin(), commit.end(), commit.begin(), [](unsigned char c) { return std::tolower(c); });
  out["git"] = {{"commit", commit.size() >= 7 && commit.size() <= 40 && is_lower_hex(commit) ? commit : "unknown"},
                {"dirty", doc.value("git_dirty", json(nullptr)).is_boolean() ? doc["git_dirty"] : json(nullptr)}};
  const json& command = v0.need(doc, "command", "");
  out["command"] = command.is_string() ? json::array({command}) : command;
  out["machine"] = migrate_machine_v0(v0.need(doc, "machine", ""));
  out["preset"] = nullptr;  // version 0 predates presets
  out["cells"] = json::array();
  const json& cells = v0.need(doc, "cells", "");
  if (!cells.is_array()) fail(source, "/cells: expected an array");
  for (size_t i = 0; i < cells.size(); ++i)
    for (auto& cell : migrate_cell_v0(cells[i], "/cells/" + std::to_string(i), v0)) out["cells"].push_back(cell);
  return out;
}

// ---- the schema -------------------------------------------------------------------------

const JsonSchema& results_schema() {
  static const JsonSchema schema(json::parse(results_schema_text()), "results/schema/v1.json (embedded)");
  return schema;
}

}  // namespace

std::string_view results_schema_text() { return embedded::kResultsSchemaV1; }

nlohmann::json parse_json_lenient(std::string_view text, const std::string& source) {
  // Google Benchmark writes non-finite doubles as bare NaN / Infinity / -Infinity, which
  // JSON lacks. Outside strings they become null; inside strings nothing changes.
  std::string cleaned;
  cleaned.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_string) {
      cleaned += c;
      if (c == '\\' && i + 1 < text.size())
        cleaned += text[++i];
      else if (c == '"')
        in_string = false;
      ++i;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
      if (text.compare(i, token.size(), token) != 0) continue;
      const size_t end = i + token.size();
      if (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) continue;
      cleaned += "null";
      i = end;
      replaced = true;
      break;
    }
    if (!replaced) cleaned += text[i++];
  }
  if (const auto problem = io::json_depth_problem(cleaned); !problem.empty())
    fail(source, "not valid JSON: " + problem);
  try {
    return json::parse(cleaned);
  } catch (const json::parse_error& e) {
    fail(source, std::string("not valid JSON: ") + e.what());
  }
}

nlohmann::json migrate_to_current(nlohmann::json doc, const std::string& source) {
  if (!doc.is_object()) fail(source, "expected a JSON object (an " + std::string(kFormat) + " document)");
  if (!doc.contains("format")) fail(source, "no \"format\" field: not an " + std::string(kFormat) + " document");
  if (doc["format"] != kFormat)
    fail(source, "format " + doc["format"].dump() + " is not \"" + kFormat + "\": not a results document");
  // Version 0 called the field "version"; version 1 renamed it "schema_version".
  const char* key = doc.contains("schema_version") ? "schema_version" : "version";
  if (!doc.contains(key)) fail(source, "no \"schema_version\" field");
  const json& version = doc[key];
  if (!version.is_number_integer() || version.get<int64_t>() < 0)
    fail(source, std::string(key) + " " + version.dump() + ": expected a non-negative integer");
  const int64_t v = version.get<int64_t>();
  if (v > kSchemaVersion)
    fail(source, "schema_version " + std::to_string(v) + " is newer than this fsdpp understands (" +
                     std::to_string(kSchemaVersion) + "): upgrade fsdpp");
  if (v == 0) return migrate_v0(doc, source);
  return doc;
}

void validate_results(const nlohmann::json& doc, const std::string& source) {
  results_schema().validate(doc, source);
  // What the schema cannot say: ids are the gate's and the dashboard's keys.
  std::map<std::string, size_t> first_index;
  const json& cells = doc.at("cells");
  for (size_t i = 0; i < cells.size(); ++i) {
    auto [it, fresh] = first_index.emplace(cells[i].at("id").get<std::string>(), i);
    if (!fresh)
      fail(source, "/cells/" + std::to_string(i) + "/id: " + cells[i]["id"].dump() + " repeats /cells/" +
                       std::to_string(it->second) + "/id (cell ids must be unique)");
  }
}

nlohmann::json load_results(const std::filesystem::path& file) {
  const std::string source = file.string();
  json doc = migrate_to_current(parse_json_lenient(read_file(file), source), source);
  validate_results(doc, source);
  return doc;
}

void write_results(const std::filesystem::path& file, const nlohmann::json& doc) {
  validate_results(doc, file.string());
  if (file.has_parent_path()) fs::create_directories(file.parent_path());
  io::write_file_atomic(file, doc.dump(1) + "\n");
}

std::string machine_fingerprint(const nlohmann::json& machine) {
  auto field = [&](const char* key) { return machine.contains(key) ? machine[key] : json(nullptr); };
  auto gib = [&](const char* key) { return field(key).is_number() ? json(whole_gib(field(key))) : json(nullptr); };
  const json stable = {{"os", field("os")},
                       {"cpu_model", field("cpu_model")},
                       {"cpu_cores", field("cpu_cores")},
                       {"memory_gib", gib("memory_bytes")},
                       {"gpu_model", field("gpu_model")},
                       {"gpu_count", field("gpu_count")},
                       {"gpu_memory_gib", gib("gpu_memory_bytes")},
                       {"driver", field("driver")},
                       {"cuda", field("cuda")},
                       {"nccl", field("nccl")},
                       {"libtorch", field("libtorch")},
                       {"compiler", field("compiler")}};
  return checkpoint::sha256_hex(stable.dump()).substr(0, 16);  // keys sorted: a stable text
}

nlohmann::json machine_info() {
  json machine;
  machine["hostname"] = host_name();
  machine["os"] = operating_system();
  machine["cpu_model"] = file_field("/proc/cpuinfo", "model name", ':');
  machine["cpu_cores"] = std::max(1u, std::thread::hardware_concurrency());
  machine["memory_bytes"] = memory_bytes();
  machine["gpu_model"] = nullptr;
  machine["gpu_count"] = runtime::cuda_device_count();
  machine["gpu_memory_bytes"] = nullptr;
  machine["driver"] = nullptr;
  machine["cuda"] = nullptr;
  machine["nccl"] = nullptr;
  if (runtime::cuda_device_count() > 0) {
    machine["gpu_model"] = runtime::device_name(c10::Device(c10::kCUDA, 0));
    machine["gpu_memory_bytes"] = runtime::cuda_plugin()->device_total_memory(0);
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  <date>"
    std::smatch m;
    const std::string nvrm = read_first_line("/proc/driver/nvidia/version");
    if (std::regex_search(nvrm, m, std::regex(R"(Kernel Module\s+([0-9][0-9.]*))"))) machine["driver"] = m[1].str();
  }
#if FSDPP_WITH_CUDA
  // The runtime fsdpp was built against (LibTorch's). NCCL: its own answer where the CUDA
  // plugin, which links it, is loaded; else the version the plugin was built against, which is
  // the one it would load (the wheel's).
  machine["cuda"] = std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
  const runtime::CudaPlugin* cuda = runtime::cuda_plugin();
  const std::string nccl = cuda != nullptr ? cuda->nccl_runtime_version() : "";
  machine["nccl"] =
      !nccl.empty() ? nccl
                    : std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
#endif
  machine["libtorch"] = TORCH_VERSION;
  machine["compiler"] = compiler_name();
  machine["fingerprint"] = machine_fingerprint(machine);
  return machine;
}

nlohmann::json new_document(const std::vector<std::string>& command, const std::string& preset) {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  json doc;
  doc["format"] = kFormat;
  doc["schema_version"] = kSchemaVersion;
  doc["run_id"] = utc_time(now, true) + "-" + random_hex8();
  doc["timestamp"] = utc_time(now, false);
  doc["git"] = git_info();
  doc["command"] = command;
  doc["machine"] = machine_info();
  doc["preset"] = preset.empty() ? json(nullptr) : json(preset);
  doc["cells"] = json::array();
  return doc;
}

std::filesystem::path append_to_history(const std::filesystem::path& history_dir, const nlohmann::json& doc) {
  const bool named = doc.is_object() && doc.contains("run_id") && doc["run_id"].is_string();
  validate_results(doc, "history document " + (named ? doc["run_id"].get<std::string>() : std::string("(no run_id)")));
  const std::string run_id = doc["run_id"];
  const fs::path dir = history_dir / doc["machine"]["fingerprint"].get<std::string>();
  fs::path target = dir / (run_id + ".json");
  fs::create_directories(dir);
  if (fs::exists(target)) fail(target.string(), "exists already: history is append-only");
  // Written in full beside the target, then hard-linked to its name: link() fails if the
  // name exists, so a concurrent writer of the same run id cannot be overwritten either.
  const fs::path pending = dir / ("." + run_id + ".json.pending." + std::to_string(::getpid()));
  io::write_file_atomic(pending, doc.dump(1) + "\n");
  const int linked = ::link(pending.c_str(), target.c_str());
  const int link_errno = errno;
  ::unlink(pending.c_str());
  if (linked != 0) {
    if (link_errno == EEXIST) fail(target.string(), "exists already: history is append-only");
    fail(target.string(), std::string("cannot create: ") + std::strerror(link_errno));
  }
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return target;
}

std::vector<nlohmann::json> load_history(const std::filesystem::path& history_dir, const std::string& fingerprint) {
  if (fingerprint.size() != 16 || !is_lower_hex(fingerprint))
    throw std::invalid_argument("machine fingerprint \"" + fingerprint + "\": expected 16 lower-case hex digits");
  const fs::path dir = history_dir / fingerprint;
  std::vector<json> docs;
  if (!fs::is_directory(dir)) return docs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const fs::path& file = entry.path();
    if (!entry.is_regular_file() || file.extension() != ".json" || file.filename().string().front() == '.') continue;
    json doc = load_results(file);
    if (doc["machine"]["fingerprint"] != fingerprint)
      fail(file.string(), "machine.fingerprint " + doc["machine"]["fingerprint"].dump() +
                              " does not match its history folder " + fingerprint);
    docs.push_back(std::move(doc));
  }
  // Timestamps are fixed-width UTC ("2026-11-22T19:00:00Z"): text order is time order.
  std::sort(docs.begin(), docs.end(), [](const json& a, const json& b) {
    return std::tie(a["timestamp"].get_ref<const std::string&>(), a["run_id"].get_ref<const std::string&>()) <
           std::tie(b["timestamp"].get_ref<const std::string&>(), b["run_id"].get_ref<const std::string&>());
  });
  return docs;
}

}  // namespace fsdpp::results
