// The progress of one `fsdpp bench` run, kept beside its --out document as
// "<out>.progress.json" (format fsdpp.bench-progress version 1, results/README.md) and
// rewritten atomically after every cell that ran: the document's header (run id, start
// time, commit, command, machine) and what each finished cell measured. A rerun of the same
// command with --resume reads it back and runs only the cells it lacks, so a run killed
// after hours (or at a device's time limit) loses one cell, not all of them. The finished
// document makes the file redundant: the command removes it after writing --out.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "harness/bench/cell_result.h"

namespace fsdpp::harness {

class BenchProgress {
 public:
  // "<out>.progress.json".
  static std::filesystem::path path_for(const std::filesystem::path& out);

  // A fresh run: `header` is the new results document (results::new_document); its
  // cells are ignored. Writes nothing until the first record().
  BenchProgress(std::filesystem::path path, nlohmann::json header);

  // Reads `path` to continue the run that wrote it. `current` is the header the rerun would
  // start with: the stored run must have the same command, commit (and dirty flag) and
  // machine fingerprint. Throws std::invalid_argument naming the file and what differs, or
  // what it does not understand (format, version, a malformed entry).
  static BenchProgress resume(const std::filesystem::path& path, const nlohmann::json& current);

  // The stored run's header: the document continues under its run id and start time.
  const nlohmann::json& header() const { return header_; }

  // Earlier outcomes of `cells`, by id: the cells that ran ok or were unavailable. Failed
  // cells are left out so that they run again (a kill may be what failed them). Throws
  // std::invalid_argument naming the file for an entry that is none of `cells`.
  std::map<std::string, CellOutcome> finished(const std::vector<BenchCell>& cells) const;

  // Adds (or replaces) the cell's outcome and rewrites the file (io::write_file_atomic).
  void record(const CellOutcome& outcome);

  // Deletes the file, if it is there.
  void remove() const;

 private:
  std::filesystem::path path_;
  nlohmann::json header_;
  nlohmann::json cells_ = nlohmann::json::array();  // one entry per recorded cell, in order
};

}  // namespace fsdpp::harness
