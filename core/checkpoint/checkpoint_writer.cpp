#include "core/checkpoint/checkpoint_writer.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>

#include "core/checkpoint/checkpoint_scan.h"
#include "core/checkpoint/sha256.h"
#include "core/io/atomic_file.h"
#include "core/io/file_tree.h"
#include "core/io/safetensors.h"

namespace fsdpp::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// ---------------------------------------------------------------- one rank's file

// What a rank wrote, sent to rank 0 as JSON.
struct RankReport {
  int rank = 0;
  std::string dir;    // where this rank saves: must be rank 0's
  std::string error;  // non-empty: this rank failed
  std::optional<CheckpointFile> file;
  struct Piece {
    std::string name;
    std::vector<int64_t> shape;
    std::string dtype;
    int64_t first_row = 0;
    int64_t rows = 0;
  };
  std::vector<Piece> pieces;
  json optimizer = json::object();
  CheckpointMesh mesh;

  json to_json() const {
    json p = json::array();
    for (const auto& x : pieces)
      p.push_back(
          {{"name", x.name}, {"shape", x.shape}, {"dtype", x.dtype}, {"first_row", x.first_row}, {"rows", x.rows}});
    json out = {
        {"rank", rank}, {"error", error},         {"dir", dir},
        {"pieces", p},  {"optimizer", optimizer}, {"mesh", {mesh.strategy, mesh.shard_group_size, mesh.replicas}}};
    if (file) out["file"] = {{"bytes", file->bytes}, {"sha256", file->sha256}};
    return out;
  }
  static RankReport from_json(const json& j) {
    RankReport r;
    r.rank = j.at("rank").get<int>();
    r.error = j.at("error").get<std::string>();
    r.dir = j.at("dir").get<std::string>();
    for (const auto& x : j.at("pieces"))
      r.pieces.push_back({x.at("name").get<std::string>(), x.at("shape").get<std::vector<int64_t>>(),
                          x.at("dtype").get<std::string>(), x.at("first_row").get<int64_t>(),
                          x.at("rows").get<int64_t>()});
    r.optimizer = j.at("optimizer");
    r.mesh = {j.at("mesh")[0].get<std::string>(), j.at("mesh")[1].get<int>(), j.at("mesh")[2].get<int>()};
    if (j.contains("file"))
      r.file = CheckpointFile{j["file"].at("bytes").get<uint64_t>(), j["file"].at("sha256").get<std::string>(), r.rank};
    return r;
  }
};

// Rows of `t` and their shape as stored: [rows, d1, ...], or 0-d for a 0-d tensor.
int64_t row_count(const CheckpointTensor& t, const std::string& where) {
  auto bad = [&](const std::string& problem) {
    throw std::invalid_argument(where + ": tensor '" + t.name + "' " + problem);
  };
  if (t.name.empty()) throw std::invalid_argument(where + ": a tensor has an empty name");
  if (!t.rows.defined()) bad("has no rows tensor");
  if (t.rows.scalar_type() != t.dtype)
    bad("is declared " + dtype_name(t.dtype) + " but its rows are " + c10::toString(t.rows.scalar_type()));
  for (auto d : t.shape)
    if (d < 0) bad("has shape " + shape_string(t.shape));
  const int64_t dim0 = t.shape.empty() ? 1 : t.shape[0];
  int64_t rows = 0;
  if (t.shape.empty()) {
    if (t.rows.dim() > 1 || t.rows.numel() > 1)
      bad("is 0-d, so its rows are one element, got " + shape_string(t.rows.sizes().vec()));
    rows = t.rows.numel();
  } else {
    rows = t.rows.dim() == 0 ? -1 : t.rows.size(0);
    if (rows < 0 || t.rows.sizes().vec() != piece_shape(t.shape, rows))
      bad("of shape " + shape_string(t.shape) + " got rows of shape " + shape_string(t.rows.sizes().vec()) +
          ", expected [rows, ...the remaining dimensions]");
  }
  if (t.first_row < 0 || t.first_row + rows > dim0)
    bad("has rows [0, " + std::to_string(dim0) + "), got [" + std::to_string(t.first_row) + ", " +
        std::to_string(t.first_row + rows) + ")");
  return rows;
}

// Writes rank `rank`'s rows into `tmp_dir` and describes them. Never throws: a failure is
// the report's error, so that every rank still reaches the collectives.
RankReport write_rank_file(const fs::path& dir, const fs::path& tmp_dir, int rank, const CheckpointContent& content,
                           const SaveOptions& options) {
  RankReport report;
  report.rank = rank;
  report.dir = dir.string();
  report.optimizer = content.optimizer.is_null() ? json::object() : content.optimizer;
  report.mesh = content.mesh;
  try {
    if (options.on_point) options.on_point(SavePoint::Started);
    const std::string where = "save_checkpoint, rank " + std::to_string(rank);
    if (!report.optimizer.is_object()) throw std::invalid_argument(where + ": optimizer state is not a JSON object");
    io::NamedTensors named;
    std::set<std::string> seen;
    for (const auto& t : content.tensors) {
      const int64_t rows = row_count(t, where);
      if (!seen.insert(t.name).second) throw std::invalid_argument(where + ": tensor '" + t.name + "' is passed twice");
      report.pieces.push_back({t.name, t.shape, dtype_name(t.dtype), t.first_row, rows});
      if (rows > 0) named.emplace_back(t.name, t.rows.reshape(piece_shape(t.shape, rows)));
    }
    // Widest dtypes first keep every tensor aligned in the file (zero-copy reads).
    std::stable_sort(named.begin(), named.end(),
                     [](const auto& a, const auto& b) { return a.second.element_size() > b.second.element_size(); });
    if (!named.empty()) {
      const fs::path path = tmp_dir / rank_file_name(rank);
      io::write_safetensors(path, named, {{"format", kFormatName}});  // fsyncs the file and the folder
      FileDigest digest = sha256_of_file(path);
      report.file = CheckpointFile{digest.bytes, digest.sha256, rank};
    }
    if (options.on_point) options.on_point(SavePoint::RankFileWritten);
  } catch (const std::exception& e) {
    report.error = e.what();
  }
  return report;
}

// ---------------------------------------------------------------- rank 0: index and commit

// a and b merged: objects key by key, anything else must be equal.
void merge_json(json& into, const json& from, const std::string& where) {
  for (const auto& [key, value] : from.items()) {
    auto it = into.find(key);
    if (it == into.end()) {
      into[key] = value;
    } else if (it->is_object() && value.is_object()) {
      merge_json(*it, value, where + "." + key);
    } else if (*it != value) {
      throw std::invalid_argument("ranks disagree on " + where + "." + key + ": " + it->dump() + " vs " + value.dump());
    }
  }
}

CheckpointIndex build_index(const fs::path& dir, const std::vector<RankReport>& reports, const json& train_state) {
  auto fail = [&](const std::string& problem) -> void {
    throw std::runtime_error("save_checkpoint " + dir.string() + ": " + problem);
  };
  CheckpointIndex index;
  index.world_size = static_cast<int>(reports.size());
  index.mesh = reports.at(0).mesh;
  index.train_state = train_state.is_null() ? json::object() : train_state;
  if (!index.train_state.is_object()) fail("train_state is not a JSON object");
  struct Owner {
    int64_t begin, end;
    int rank;
    std::string file;
  };
  std::map<std::string, std::vector<Owner>> owners;
  for (const auto& r : reports) {
    if (r.dir != dir.string())
      fail("rank " + std::to_string(r.rank) + " saves into " + r.dir + ": every rank must pass the same folder");
    if (r.file) index.files[rank_file_name(r.rank)] = *r.file;
    try {
      merge_json(index.optimizer, r.optimizer, "optimizer");
    } catch (const std::exception& e) {
      fail(e.what());
    }
    for (const auto& p : r.pieces) {
      auto [it, inserted] = index.tensors.try_emplace(p.name);
      TensorEntry& entry = it->second;
      if (inserted) {
        entry.shape = p.shape;
        entry.dtype = dtype_from_name(p.dtype);
      } else if (entry.shape != p.shape || dtype_name(entry.dtype) != p.dtype) {
        fail("rank " + std::to_string(r.rank) + " says tensor '" + p.name + "' is " + p.dtype + " " +
             shape_string(p.shape) + ", an earlier rank says " + dtype_name(entry.dtype) + " " +
             shape_string(entry.shape));
      }
      if (p.rows > 0) owners[p.name].push_back({p.first_row, p.first_row + p.rows, r.rank, rank_file_name(r.rank)});
    }
  }
  auto range = [](int64_t b, int64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + ")"; };
  for (auto& [name, entry] : index.tensors) {
    auto& list = owners[name];
    std::sort(list.begin(), list.end(), [](const Owner& a, const Owner& b) { return a.begin < b.begin; });
    int64_t covered = 0;
    int last_rank = -1;
    for (const auto& o : list) {
      if (o.begin < covered)
        fail("rows " + range(o.begin, std::min(covered, o.end)) + " of '" + name + "' are passed by rank " +
             std::to_string(last_rank) + " and rank " + std::to_string(o.rank) +
             " (each row must come from one rank: replicas pass disjoint rows)");
      if (o.begin > covered) fail("rows " + range(covered, o.begin) + " of '" + name + "' are passed by no rank");
      entry.pieces.push_back({o.file, o.begin, o.end});
      covered = o.end;
      last_rank = o.rank;
    }
    if (covered != entry.dim0())
      fail("rows " + range(covered, entry.dim0()) + " of '" + name + "' are passed by no rank");
  }
  // What we write must be what we read back.
  return CheckpointIndex::from_json(index.to_json(), dir / kIndexFileName);
}

[[noreturn]] void fail_io(const fs::path& path, const std::string& step) {
  throw std::runtime_error("save_checkpoint " + path.string() + ": " + step + " failed: " + std::strerror(errno));
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_io(dir, "open folder for fsync");
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail_io(dir, "fsync of the folder");
}

fs::path normalized(const fs::path& dir) {
  fs::path d = dir.lexically_normal();
  if (d.filename().empty()) d = d.parent_path();
  if (d.filename().empty()) throw std::invalid_argument("save_checkpoint: '" + dir.string() + "' is not a folder name");
  return d;
}

fs::path make_temp_dir(const fs::path& dir) {
  std::random_device random;
  char hex[20];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(random() ^ static_cast<unsigned>(::getpid())));
  fs::path tmp = dir;
  tmp += std::string(".tmp-") + hex;
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  fs::create_directories(parent);
  if (!fs::create_directory(tmp)) throw std::runtime_error("save_checkpoint " + tmp.string() + ": already exists");
  fsync_dir(parent);
  return tmp;
}

// Writes index.json into `tmp` and renames `tmp` to `dir`: the commit.
SavedCheckpoint commit(const fs::path& tmp, const fs::path& dir, const CheckpointIndex& index,
                       const SaveOptions& options) {
  if (options.on_point) options.on_point(SavePoint::AllFilesWritten);
  io::write_file_atomic(tmp / kIndexFileName, index.to_json().dump(2) + "\n");  // fsyncs the file and `tmp`
  if (options.on_point) options.on_point(SavePoint::IndexWritten);
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  std::error_code ec;
  bool replaced = false;
  if (fs::exists(dir, ec)) {
    // Same step saved again: swap atomically where the file system can; `tmp` then holds
    // the old checkpoint, removed below.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      replaced = true;
    } else {
      io::remove_tree(dir);
    }
  }
  if (!replaced && ::rename(tmp.c_str(), dir.c_str()) != 0) fail_io(dir, "rename from " + tmp.filename().string());
  fsync_dir(parent);
  if (options.on_point) options.on_point(SavePoint::Committed);
  SavedCheckpoint saved;
  saved.dir = dir;
  if (replaced) io::remove_tree(tmp, ec);
  std::function<void()> on_renamed;
  if (options.on_point) on_renamed = [&] { options.on_point(SavePoint::Pruning); };
  auto pruned = prune_checkpoints(parent, options.keep_last, dir, on_renamed);
  saved.removed = std::move(pruned.removed);
  saved.warnings = std::move(pruned.warnings);
  return saved;
}

// Rank 0's part after every rank reported: index and commit, or cleanup. Returns the
// error ("" on success).
std::string finish(const fs::path& tmp, const fs::path& dir, const std::vector<RankReport>& reports,
                   const json& train_state, const SaveOptions& options, SavedCheckpoint& saved) {
  std::string error;
  for (const auto& r : reports)
    if (!r.error.empty()) {
      error = r.error;
      break;
    }
  if (error.empty()) {
    try {
      saved = commit(tmp, dir, build_index(dir, reports, train_state), options);
      return "";
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  std::error_code ec;
  io::remove_tree(tmp, ec);
  return error;
}

// ---------------------------------------------------------------- text over the communicator

std::vector<std::string> all_gather_text(comm::Communicator& world, const std::string& text) {
  const int n = world.size();
  at::Tensor lengths = at::empty({n}, at::kLong);
  world.all_gather_into(lengths, at::full({1}, static_cast<int64_t>(text.size()), at::kLong));
  const int64_t longest = lengths.max().item<int64_t>();
  at::Tensor mine = at::zeros({longest}, at::kByte);
  // An empty tensor's data_ptr() is null, and memcpy's pointers must not be, even for 0 bytes.
  if (!text.empty()) std::memcpy(mine.data_ptr(), text.data(), text.size());
  at::Tensor all = at::empty({n * longest}, at::kByte);
  world.all_gather_into(all, mine);
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  const char* bytes = static_cast<const char*>(all.data_ptr());
  for (int r = 0; r < n; ++r) out.emplace_back(bytes + r * longest, lengths[r].item<int64_t>());
  return out;
}

std::string broadcast_text(comm::Communicator& world, const std::string& text) {
  at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  world.broadcast(length, 0);
  at::Tensor bytes = at::zeros({length.item<int64_t>()}, at::kByte);
  if (world.rank() == 0 && !text.empty()) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  world.broadcast(bytes, 0);
  return std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel());
}

}  // namespace

SavedCheckpoint save_checkpoint(comm::Communicator& world, const fs::path& dir_in, const CheckpointContent& content,
                                const json& train_state, const SaveOptions& options) {
  const fs::path dir = normalized(dir_in);
  const bool root = world.rank() == 0;
  // 1. Rank 0 creates the temporary folder and tells everyone its name (or its failure).
  std::string message;
  if (root) {
    try {
      message = "ok " + make_temp_dir(dir).filename().string();
    } catch (const std::exception& e) {
      message = std::string("error ") + e.what();
    }
  }
  message = broadcast_text(world, message);
  if (message.rfind("ok ", 0) != 0) throw std::runtime_error(message.substr(6));
  const fs::path tmp = dir.parent_path() / message.substr(3);

  // 2. Every rank writes its file; rank 0 learns what each wrote.
  RankReport mine = write_rank_file(dir, tmp, world.rank(), content, options);
  auto texts = all_gather_text(world, mine.to_json().dump());

  // 3. Rank 0 writes the index and commits; everyone learns the outcome.
  SavedCheckpoint saved;
  saved.dir = dir;
  std::string error;
  if (root) {
    std::vector<RankReport> reports;
    reports.reserve(texts.size());
    for (const auto& t : texts) reports.push_back(RankReport::from_json(json::parse(t)));
    error = finish(tmp, dir, reports, train_state, options, saved);
  }
  error = broadcast_text(world, error);
  if (!error.empty()) throw std::runtime_error(error);
  return saved;
}

SavedCheckpoint write_checkpoint(const fs::path& dir_in, const std::vector<CheckpointContent>& ranks,
                                 const json& train_state, const SaveOptions& options) {
  const fs::path dir = normalized(dir_in);
  if (ranks.empty()) throw std::invalid_argument("write_checkpoint " + dir.string() + ": no ranks");
  const fs::path tmp = make_temp_dir(dir);
  std::vector<RankReport> reports;
  for (size_t r = 0; r < ranks.size(); ++r)
    reports.push_back(write_rank_file(dir, tmp, static_cast<int>(r), ranks[r], options));
  SavedCheckpoint saved;
  std::string error = finish(tmp, dir, reports, train_state, options, saved);
  if (!error.empty()) throw std::runtime_error(error);
  return saved;
}

}  // namespace fsdpp::checkpoint
