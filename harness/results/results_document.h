// The fsdpp.results document: what `fsdpp bench` writes, what the regression gate and the
// dashboard read. Spec: results/README.md ("fsdpp.results version 1"); JSON Schema:
// results/schema/v1.json (embedded in the binary at build time, so any working directory
// works). Every reader here migrates older versions to the current one and refuses newer
// versions and unknown formats with a one-line error naming the file.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpp::results {

constexpr int kSchemaVersion = 1;
constexpr const char* kFormat = "fsdpp.results";

// Parses JSON that may contain Google Benchmark's bare NaN, Infinity and -Infinity tokens:
// outside strings they read as null. Throws std::runtime_error "<source>: <what>" on
// malformed JSON.
nlohmann::json parse_json_lenient(std::string_view text, const std::string& source);

// Reads `file` (NaN/Infinity tolerant), migrates older schema versions to the current one
// and validates. Throws std::runtime_error "<file>: <what>", e.g. "<file>: schema_version 2
// is newer than this fsdpp understands (1): upgrade fsdpp".
nlohmann::json load_results(const std::filesystem::path& file);

// Returns `doc` in the current schema version (v0 -> v1; v1 unchanged). Does not validate.
// Throws std::runtime_error "<source>: <what>" for unknown formats, newer versions and v0
// documents that lack what the migration needs.
nlohmann::json migrate_to_current(nlohmann::json doc, const std::string& source);

// results/schema/v1.json as compiled into this binary.
std::string_view results_schema_text();

// Checks `doc` against results/schema/v1.json and the rules a schema cannot say (cell ids
// unique). Throws std::runtime_error "<source>: <json pointer>: <expected>" at the first
// violation.
void validate_results(const nlohmann::json& doc, const std::string& source);

// Validates, then writes `doc` atomically (io::write_file_atomic), indented; creates the
// parent directory if needed. Throws std::runtime_error naming `file` when invalid or on
// I/O errors (nothing is written then).
void write_results(const std::filesystem::path& file, const nlohmann::json& doc);

// The "machine" object of this host: CPU, memory, GPU, versions, and "fingerprint", the
// first 16 hex of sha256 over the fields that identify the hardware and software stack
// (not the hostname; memory rounded to GiB). Fields that cannot be known are null.
nlohmann::json machine_info();

// The fingerprint machine_info() stores for `machine` (a "machine" object): first 16 hex of
// sha256 over os, cpu_model, cpu_cores, memory in whole GiB, gpu_model, gpu_count, GPU
// memory in whole GiB, driver, cuda, nccl, libtorch, compiler. Missing fields count as null.
std::string machine_fingerprint(const nlohmann::json& machine);

// Stores `doc` (validated) as <history_dir>/<machine.fingerprint>/<run_id>.json, written
// atomically. Returns that path. Throws std::runtime_error if it exists already: history
// is append-only.
std::filesystem::path append_to_history(const std::filesystem::path& history_dir, const nlohmann::json& doc);

// Every *.json under <history_dir>/<fingerprint>/, loaded (migrated, validated), oldest
// first by timestamp (run_id breaks ties). Empty when the directory does not exist.
// Throws std::invalid_argument unless `fingerprint` is 16 hex digits, and
// std::runtime_error naming the file for a document that does not load or whose
// fingerprint is not its folder's.
std::vector<nlohmann::json> load_history(const std::filesystem::path& history_dir, const std::string& fingerprint);

// A fresh document with no cells: format, schema_version, run_id (UTC timestamp + 8 random
// hex), timestamp, git, command, machine (machine_info()), preset (null when `preset` is
// empty), cells: []. git: $FSDPP_COMMIT and $FSDPP_DIRTY (1/0) where set, as CI runners
// set them; else the HEAD of the source tree this binary was built from, read from its
// .git files, with dirty null (unknown); "unknown" when there is none.
nlohmann::json new_document(const std::vector<std::string>& command, const std::string& preset);

}  // namespace fsdpp::results
