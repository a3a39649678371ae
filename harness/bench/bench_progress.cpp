#include "harness/bench/bench_progress.h"

#include <stdexcept>

#include "core/io/atomic_file.h"
#include "harness/bench/cell_run.h"

namespace fsdpp::harness {

namespace {

constexpr const char* kFormat = "fsdpp.bench-progress";
constexpr int kVersion = 1;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw std::invalid_argument(path.string() + ": " + what);
}

nlohmann::json entry(const CellOutcome& o) {
  nlohmann::json reps = nlohmann::json::array();
  for (const auto& r : o.repetitions) reps.push_back({{"step_ms", r.step_ms}, {"record", r.record}});
  return {{"id", o.cell.id()}, {"status", o.status}, {"reason", o.reason}, {"repetitions", reps}};
}

// What a stored entry says; throws naming the file for anything else.
CellOutcome outcome_from(const std::filesystem::path& path, const nlohmann::json& e, const BenchCell& cell) {
  CellOutcome o;
  o.cell = cell;
  try {
    o.status = e.at("status").get<std::string>();
    o.reason = e.at("reason").get<std::string>();
    if (o.status != "ok" && o.status != "unavailable" && o.status != "failed")
      fail(path, "cell " + cell.id() + ": status '" + o.status + "' (expected ok, unavailable or failed)");
    for (const auto& r : e.at("repetitions")) {
      RepetitionResult rep;
      rep.step_ms = r.at("step_ms").get<std::vector<double>>();
      rep.record = r.at("record");
      o.repetition_seconds.push_back(rep.seconds());
      o.repetitions.push_back(std::move(rep));
    }
  } catch (const nlohmann::json::exception& ex) {
    fail(path, "cell " + cell.id() + ": malformed entry (" + std::string(ex.what()) + ")");
  }
  if (o.status == "ok" && o.repetitions.empty()) fail(path, "cell " + cell.id() + ": ok without repetitions");
  return o;
}

// `key` of the stored header must equal the current one's.
void require_same(const std::filesystem::path& path, const nlohmann::json& stored, const nlohmann::json& current,
                  const std::string& pointer, const std::string& what) {
  const nlohmann::json::json_pointer p(pointer);
  const auto a = stored.contains(p) ? stored.at(p) : nlohmann::json();
  const auto b = current.contains(p) ? current.at(p) : nlohmann::json();
  if (a != b)
    fail(path, "was written by another " + what + " (" + a.dump() + "; this run: " + b.dump() +
                   "): rerun that command there, or start over without --resume");
}

}  // namespace

std::filesystem::path BenchProgress::path_for(const std::filesystem::path& out) {
  return out.string() + ".progress.json";
}

BenchProgress::BenchProgress(std::filesystem::path path, nlohmann::json header)
    : path_(std::move(path)), header_(std::move(header)) {
  header_.erase("cells");
}

BenchProgress BenchProgress::resume(const std::filesystem::path& path, const nlohmann::json& current) {
  nlohmann::json doc;
  try {
    doc = read_json_file(path);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
  if (!doc.is_object() || doc.value("format", "") != kFormat) fail(path, std::string("not an ") + kFormat + " file");
  if (!doc.contains("version") || doc["version"] != kVersion)
    fail(path, "version " + (doc.contains("version") ? doc["version"].dump() : std::string("(none)")) +
                   " is not understood (expected " + std::to_string(kVersion) + ")");
  if (!doc.contains("header") || !doc["header"].is_object() || !doc.contains("cells") || !doc["cells"].is_array())
    fail(path, "needs an object \"header\" and an array \"cells\"");
  const auto& header = doc["header"];
  require_same(path, header, current, "/command", "command");
  require_same(path, header, current, "/git", "commit");
  require_same(path, header, current, "/machine/fingerprint", "machine");
  BenchProgress progress(path, header);
  progress.cells_ = doc["cells"];
  return progress;
}

std::map<std::string, CellOutcome> BenchProgress::finished(const std::vector<BenchCell>& cells) const {
  std::map<std::string, const BenchCell*> by_id;
  for (const auto& c : cells) by_id[c.id()] = &c;
  std::map<std::string, CellOutcome> out;
  for (const auto& e : cells_) {
    const std::string id = e.is_object() && e.contains("id") && e["id"].is_string() ? e["id"].get<std::string>() : "";
    auto it = by_id.find(id);
    if (it == by_id.end()) fail(path_, "cell '" + id + "' is not one this command selects");
    auto outcome = outcome_from(path_, e, *it->second);
    if (outcome.status != "failed") out[id] = std::move(outcome);
  }
  return out;
}

void BenchProgress::record(const CellOutcome& outcome) {
  auto e = entry(outcome);
  bool replaced = false;
  for (auto& existing : cells_)
    if (existing["id"] == e["id"]) {
      existing = e;
      replaced = true;
    }
  if (!replaced) cells_.push_back(std::move(e));
  const nlohmann::json doc = {{"format", kFormat}, {"version", kVersion}, {"header", header_}, {"cells", cells_}};
  io::write_file_atomic(path_, doc.dump(1) + "\n");
}

void BenchProgress::remove() const {
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

}  // namespace fsdpp::harness
