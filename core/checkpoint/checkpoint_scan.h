// The checkpoints of a run: folders "step-<N>" (N zero-padded to at least 6 digits) in
// one checkpoints folder (e.g. <run>/checkpoints), plus "step-<N>.tmp-<hex>" folders that
// saves leave behind when they die before their commit (CHECKPOINT.md, "Commit").
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fsdpp::checkpoint {

std::string step_dir_name(int64_t step);  // "step-000120"
// The step of "step-<digits>", else nothing (also for temporary folders).
std::optional<int64_t> parse_step_dir_name(const std::string& name);

struct SkippedCheckpoint {
  std::filesystem::path path;
  std::string reason;            // one line, e.g. "index.json missing (torn save)"
  std::string describe() const;  // "skipping step-000200.tmp-1a2b: index.json missing (torn save)"
};

struct LatestCheckpoint {
  std::optional<std::filesystem::path> dir;  // nothing when no complete checkpoint exists
  int64_t step = -1;
  // Every checkpoint (or torn save) newer than `dir`, newest first, with why it is not
  // complete. Older ones are not inspected.
  std::vector<SkippedCheckpoint> skipped;
};

// Newest complete checkpoint in `checkpoints_dir`: index.json valid and every file's size
// and sha256 as it says (with verify_checksums; sizes only without). A missing folder
// has none. Throws only when the folder cannot be listed.
LatestCheckpoint find_latest_complete(const std::filesystem::path& checkpoints_dir, bool verify_checksums = true);

struct PruneResult {
  std::vector<std::filesystem::path> removed;
  std::vector<std::string> warnings;  // folders that could not be removed, one line each
};

// Keeps the newest `keep_last` complete checkpoints (index valid, file sizes match; not
// re-hashed) and `keep` (always); removes older complete ones, and torn saves
// ("step-<N>.tmp-*") of steps up to the newest kept one: they can never complete.
// Incomplete "step-<N>" folders are left alone. keep_last <= 0 removes nothing.
// A complete checkpoint is first renamed to "step-<N>.tmp-rm<hex>", then removed, so that
// a crash midway leaves a torn-save folder (removed by a later prune), never a half-removed
// "step-<N>". `on_renamed` (a test hook) is called after each such rename.
PruneResult prune_checkpoints(const std::filesystem::path& checkpoints_dir, int keep_last,
                              const std::filesystem::path& keep = {}, const std::function<void()>& on_renamed = {});

}  // namespace fsdpp::checkpoint
