#include "core/checkpoint/checkpoint_scan.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <tuple>

#include "core/checkpoint/checkpoint_index.h"
#include "core/checkpoint/checkpoint_reader.h"
#include "core/io/file_tree.h"

namespace fsdpp::checkpoint {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "step-";
constexpr const char* kTempMarker = ".tmp-";

std::optional<int64_t> parse_digits(const std::string& s) {
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(s);
}

struct Candidate {
  fs::path path;
  int64_t step = 0;
  bool temporary = false;  // "step-<N>.tmp-*": a save that never committed
};

// Step folders and torn saves in `dir`, newest first; for one step the committed folder
// comes before temporary ones.
std::vector<Candidate> list_candidates(const fs::path& dir) {
  std::vector<Candidate> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& item : fs::directory_iterator(dir)) {
    if (!item.is_directory()) continue;
    const std::string name = item.path().filename().string();
    if (auto step = parse_step_dir_name(name)) {
      out.push_back({item.path(), *step, false});
      continue;
    }
    auto marker = name.find(kTempMarker);
    if (marker == std::string::npos) continue;
    if (auto step = parse_step_dir_name(name.substr(0, marker))) out.push_back({item.path(), *step, true});
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return std::make_tuple(-a.step, a.temporary, a.path.string()) <
           std::make_tuple(-b.step, b.temporary, b.path.string());
  });
  return out;
}

std::string torn_reason(const fs::path& temp_dir) {
  std::error_code ec;
  return fs::exists(temp_dir / kIndexFileName, ec) ? "index.json written but the folder was never renamed (torn save)"
                                                   : "index.json missing (torn save)";
}

// Empty when complete; else why not.
std::string incomplete_reason(const fs::path& dir, bool verify_checksums) {
  try {
    auto reader = CheckpointReader::open(dir);
    if (verify_checksums) reader.verify_all();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

std::string step_dir_name(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%06lld", kPrefix, static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  return parse_digits(name.substr(std::string(kPrefix).size()));
}

std::string SkippedCheckpoint::describe() const { return "skipping " + path.filename().string() + ": " + reason; }

LatestCheckpoint find_latest_complete(const fs::path& checkpoints_dir, bool verify_checksums) {
  LatestCheckpoint latest;
  for (const auto& c : list_candidates(checkpoints_dir)) {
    if (c.temporary) {
      latest.skipped.push_back({c.path, torn_reason(c.path)});
      continue;
    }
    std::string reason = incomplete_reason(c.path, verify_checksums);
    if (reason.empty()) {
      latest.dir = c.path;
      latest.step = c.step;
      break;
    }
    latest.skipped.push_back({c.path, reason});
  }
  return latest;
}

PruneResult prune_checkpoints(const fs::path& checkpoints_dir, int keep_last, const fs::path& keep,
                              const std::function<void()>& on_renamed) {
  PruneResult result;
  if (keep_last <= 0) return result;
  auto remove = [&](const fs::path& path) {
    std::error_code ec;
    io::remove_tree(path, ec);
    if (ec)
      result.warnings.push_back("could not remove old checkpoint " + path.string() + ": " + ec.message());
    else
      result.removed.push_back(path);
  };
  // A complete checkpoint leaves the "step-<N>" names before its files go: a crash while
  // removing them left an empty or half-emptied step-<N> that no prune removed and that
  // looked like a damaged checkpoint (found by ci/fault_trials.sh, crash during save).
  auto retire = [&](const fs::path& path) {
    std::random_device random;
    char hex[20];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(random() ^ static_cast<unsigned>(::getpid())));
    fs::path aside = path;
    aside += std::string(kTempMarker) + "rm" + hex;
    if (::rename(path.c_str(), aside.c_str()) != 0) {
      result.warnings.push_back("could not remove old checkpoint " + path.string() + ": rename to " +
                                aside.filename().string() + " failed: " + std::strerror(errno));
      return;
    }
    if (on_renamed) on_renamed();
    std::error_code ec;
    io::remove_tree(aside, ec);
    if (ec)
      result.warnings.push_back("could not remove old checkpoint " + path.string() + " (renamed " +
                                aside.filename().string() + "): " + ec.message());
    else
      result.removed.push_back(path);
  };
  const auto candidates = list_candidates(checkpoints_dir);
  std::error_code ec;
  auto is_keep = [&](const fs::path& p) { return !keep.empty() && fs::equivalent(p, keep, ec); };
  int kept = 0;
  std::optional<int64_t> newest_kept;
  for (const auto& c : candidates) {
    if (c.temporary || !incomplete_reason(c.path, /*verify_checksums=*/false).empty()) continue;
    if (kept < keep_last || is_keep(c.path)) {
      ++kept;
      if (!newest_kept) newest_kept = c.step;
    } else {
      retire(c.path);
    }
  }
  for (const auto& c : candidates)
    if (c.temporary && newest_kept && c.step <= *newest_kept) remove(c.path);
  return result;
}

}  // namespace fsdpp::checkpoint
