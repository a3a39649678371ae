#include "core/checkpoint/checkpoint_index.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "core/checkpoint/sha256.h"
#include "core/io/json_depth.h"
#include "core/io/shape_text.h"

namespace fsdpp::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::vector<std::pair<const char*, at::ScalarType>>& dtype_table() {
  static const std::vector<std::pair<const char*, at::ScalarType>> table = {
      {"BOOL", at::kBool}, {"U8", at::kByte},  {"I8", at::kChar},       {"I16", at::kShort}, {"I32", at::kInt},
      {"I64", at::kLong},  {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"F32", at::kFloat}, {"F64", at::kDouble},
  };
  return table;
}

constexpr const char* kIndexChecksumField = "index_sha256";
constexpr int kFirstVersionWithIndexChecksum = 2;

// The checksum of an index's own content (CHECKPOINT.md, index_sha256): SHA-256 of the
// compact dump (keys sorted, as nlohmann::json keeps them) of the index without that field.
// Whitespace is not content; any change of a value, key or structure is.
std::string index_content_sha256(json body) {
  body.erase(kIndexChecksumField);
  return sha256_hex(body.dump());
}

// Reads fields of one JSON object, naming `where` in every error.
class Fields {
 public:
  Fields(const json& object, std::string where, const fs::path& path)
      : object_(object), where_(std::move(where)), path_(path) {
    if (!object_.is_object()) fail("is " + object_.dump() + ", expected an object");
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw std::runtime_error("checkpoint index " + path_.string() + ": " + (where_.empty() ? "" : where_ + " ") +
                             problem);
  }

  // Every key must be one of `known` (a newer writer's field would be misread otherwise).
  void only(const std::vector<std::string>& known, int64_t version = kFormatVersion) const {
    for (const auto& [key, value] : object_.items())
      if (std::find(known.begin(), known.end(), key) == known.end())
        fail("has unknown field '" + key + "' (this reader knows version " + std::to_string(version) + ")");
  }

  const json& at(const std::string& key) const {
    auto it = object_.find(key);
    if (it == object_.end()) fail("lacks field '" + key + "'");
    return *it;
  }
  std::string string(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_string()) fail("field '" + key + "' is " + v.dump() + ", expected a string");
    return v.get<std::string>();
  }
  int64_t integer(const std::string& key, int64_t min) const {
    const json& v = at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < min)
      fail("field '" + key + "' is " + v.dump() + ", expected an integer >= " + std::to_string(min));
    return v.get<int64_t>();
  }
  const json& object(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_object()) fail("field '" + key + "' is " + v.dump() + ", expected an object");
    return v;
  }

 private:
  const json& object_;
  std::string where_;
  const fs::path& path_;
};

bool is_bare_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

int64_t TensorEntry::row_numel() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<int64_t> piece_shape(const std::vector<int64_t>& shape, int64_t rows) {
  if (shape.empty()) return {};
  auto out = shape;
  out[0] = rows;
  return out;
}

std::string dtype_name(at::ScalarType dtype) {
  for (const auto& [name, type] : dtype_table())
    if (type == dtype) return name;
  throw std::invalid_argument(std::string("dtype ") + c10::toString(dtype) + " cannot be stored in a checkpoint");
}

at::ScalarType dtype_from_name(const std::string& name) {
  for (const auto& [n, type] : dtype_table())
    if (name == n) return type;
  throw std::invalid_argument("unknown dtype '" + name + "' (known: BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64)");
}

std::string shape_string(const std::vector<int64_t>& shape) { return io::shape_text(shape); }

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

json CheckpointIndex::to_json() const {
  json files_json = json::object();
  for (const auto& [name, f] : files) files_json[name] = {{"rank", f.rank}, {"bytes", f.bytes}, {"sha256", f.sha256}};
  json tensors_json = json::object();
  for (const auto& [name, t] : tensors) {
    json pieces = json::array();
    for (const auto& p : t.pieces) pieces.push_back({{"file", p.file}, {"rows", {p.begin, p.end}}});
    tensors_json[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"pieces", pieces}};
  }
  json out = {
      {"format", kFormatName},
      {"version", kFormatVersion},
      {"world_size", world_size},
      {"mesh", {{"strategy", mesh.strategy}, {"shard_group_size", mesh.shard_group_size}, {"replicas", mesh.replicas}}},
      {"checksum", "sha256"},
      {"files", files_json},
      {"tensors", tensors_json},
      {"optimizer", optimizer},
      {"train_state", train_state}};
  out[kIndexChecksumField] = index_content_sha256(out);
  return out;
}

CheckpointIndex CheckpointIndex::from_json(const json& root, const fs::path& path) {
  Fields top(root, "", path);
  // Format and version first: anything else may mean something different in another one.
  const std::string format = top.string("format");
  if (format != kFormatName) top.fail("format is '" + format + "', expected '" + std::string(kFormatName) + "'");
  const int64_t version = top.integer("version", 0);
  if (version < 1 || version > kFormatVersion)
    top.fail("version is " + std::to_string(version) + ", this reader knows versions 1 to " +
             std::to_string(kFormatVersion));
  std::vector<std::string> known = {"format", "version", "world_size", "mesh",       "checksum",
                                    "files",  "tensors", "optimizer",  "train_state"};
  if (version >= kFirstVersionWithIndexChecksum) known.emplace_back(kIndexChecksumField);
  top.only(known, version);
  if (top.string("checksum") != "sha256") top.fail("checksum is '" + top.string("checksum") + "', expected 'sha256'");

  CheckpointIndex index;
  index.world_size = static_cast<int>(top.integer("world_size", 1));
  Fields mesh(top.at("mesh"), "mesh", path);
  mesh.only({"strategy", "shard_group_size", "replicas"});
  index.mesh.strategy = mesh.string("strategy");
  index.mesh.shard_group_size = static_cast<int>(mesh.integer("shard_group_size", 1));
  index.mesh.replicas = static_cast<int>(mesh.integer("replicas", 1));
  index.optimizer = top.object("optimizer");
  index.train_state = top.object("train_state");

  for (const auto& [name, value] : top.object("files").items()) {
    Fields f(value, "file '" + name + "'", path);
    if (!is_bare_file_name(name)) f.fail("is not a bare file name");
    f.only({"rank", "bytes", "sha256"});
    CheckpointFile file;
    file.rank = static_cast<int>(f.integer("rank", 0));
    file.bytes = static_cast<uint64_t>(f.integer("bytes", 0));
    file.sha256 = f.string("sha256");
    if (!is_sha256_hex(file.sha256)) f.fail("sha256 '" + file.sha256 + "' is not 64 lower-case hex digits");
    index.files[name] = file;
  }

  int64_t total_bytes = 0;  // a reader sizes buffers and sums sizes in int64: both must fit
  for (const auto& [name, value] : top.object("tensors").items()) {
    Fields t(value, "tensor '" + name + "'", path);
    t.only({"dtype", "shape", "pieces"});
    TensorEntry entry;
    try {
      entry.dtype = dtype_from_name(t.string("dtype"));
    } catch (const std::invalid_argument& e) {
      t.fail(e.what());
    }
    const json& shape = t.at("shape");
    if (!shape.is_array()) t.fail("shape is " + shape.dump() + ", expected an array");
    for (const auto& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) t.fail("shape " + shape.dump() + " is not all integers >= 0");
      entry.shape.push_back(d.get<int64_t>());
    }
    int64_t bytes = static_cast<int64_t>(c10::elementSize(entry.dtype));
    for (int64_t d : entry.shape)
      if (__builtin_mul_overflow(bytes, d, &bytes)) t.fail("shape " + shape.dump() + " holds more than 2^63 bytes");
    if (__builtin_add_overflow(total_bytes, bytes, &total_bytes))
      t.fail("takes the checkpoint's tensors past 2^63 bytes in all");
    const json& pieces = t.at("pieces");
    if (!pieces.is_array()) t.fail("pieces is " + pieces.dump() + ", expected an array");
    int64_t covered = 0;
    for (const auto& p : pieces) {
      Fields pf(p, "tensor '" + name + "' piece", path);
      pf.only({"file", "rows"});
      TensorPiece piece;
      piece.file = pf.string("file");
      if (!index.files.count(piece.file)) pf.fail("names file '" + piece.file + "', which 'files' does not list");
      const json& rows = pf.at("rows");
      if (!rows.is_array() || rows.size() != 2 || !rows[0].is_number_integer() || !rows[1].is_number_integer())
        pf.fail("rows is " + rows.dump() + ", expected [begin, end]");
      piece.begin = rows[0].get<int64_t>();
      piece.end = rows[1].get<int64_t>();
      if (piece.begin != covered || piece.end <= piece.begin)
        pf.fail("rows " + rows.dump() + " do not continue at row " + std::to_string(covered) +
                " (pieces must tile the rows in order, without gaps or overlaps)");
      covered = piece.end;
      entry.pieces.push_back(piece);
    }
    if (covered != entry.dim0())
      t.fail("pieces cover rows [0, " + std::to_string(covered) + "), expected [0, " + std::to_string(entry.dim0()) +
             ")");
    index.tensors[name] = std::move(entry);
  }
  // Version 2 on: the index covers itself, so that a changed value that leaves valid JSON
  // (a step, a data position, an AdamW step count) is not read as if it were the saved one.
  // Checked last, so that an index that is wrong in form says what is wrong with it.
  // Version 1 predates this and is read as it was written.
  if (version >= kFirstVersionWithIndexChecksum) {
    const std::string stated = top.string(kIndexChecksumField);
    const std::string actual = index_content_sha256(root);
    if (stated != actual)
      top.fail("content sha256 is " + actual + ", " + kIndexChecksumField + " says " + stated +
               " (index.json corrupt or edited)");
  }
  return index;
}

CheckpointIndex CheckpointIndex::read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    throw std::runtime_error("checkpoint index " + path.string() +
                             (fs::exists(path, ec) ? ": cannot be read" : ": missing"));
  }
  std::stringstream text;
  text << in.rdbuf();
  json root;
  if (const auto problem = io::json_depth_problem(text.str()); !problem.empty())
    throw std::runtime_error("checkpoint index " + path.string() + ": not valid JSON: " + problem);
  try {
    root = json::parse(text.str());
  } catch (const json::parse_error& e) {
    throw std::runtime_error("checkpoint index " + path.string() + ": not valid JSON: " + e.what());
  }
  return from_json(root, path);
}

}  // namespace fsdpp::checkpoint
