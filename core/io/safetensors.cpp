// safetensors reader (mmap + validation), writer (streamed, atomic) and HF sharded
// checkpoints. Format and the rules enforced here: core/io/SAFETENSORS.md, after the spec at
// https://huggingface.co/docs/safetensors and the reference implementation's validate()
// (safetensors/src/tensor.rs).
#include "core/io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "core/compat/torch_compat.h"
#include "core/io/atomic_file.h"

// The format is little-endian; we read and write tensor bytes as they are in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace fsdpp::io {
// Named, not anonymous: SafetensorsFile::State (external linkage) holds one.
namespace safetensors_detail {

// A private (copy-on-write) mapping of the whole file, opened read-only: writes through a
// view change this process's pages only. Unmapped when the last owner (file object or
// view tensor's deleter) lets go.
struct Mapping {
  const uint8_t* bytes = nullptr;
  uint64_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (bytes != nullptr) ::munmap(const_cast<uint8_t*>(bytes), size);
  }
};

}  // namespace safetensors_detail

using safetensors_detail::Mapping;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFileName = "model.safetensors";
constexpr const char* kIndexFileName = "model.safetensors.index.json";
// The reference implementation refuses headers above 100 MB (MAX_HEADER_SIZE in
// safetensors/src/tensor.rs); so do we, before allocating anything for one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void fail_file(const fs::path& path, const std::string& problem) {
  throw std::runtime_error("safetensors file " + path.string() + ": " + problem);
}

[[noreturn]] void fail_index(const fs::path& path, const std::string& problem) {
  throw std::runtime_error("safetensors index " + path.string() + ": " + problem);
}

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// ---- dtypes -------------------------------------------------------------------------------

// Every byte-sized dtype of the spec. `scalar_type` is empty where LibTorch (this version)
// has no such type: such tensors are validated and listed but cannot be returned.
struct DtypeSpec {
  const char* name;
  uint64_t element_bytes;
  std::optional<at::ScalarType> scalar_type;
};

const std::vector<DtypeSpec>& dtype_specs() {
  static const std::vector<DtypeSpec> specs = {
    {"BOOL", 1, at::kBool},
    {"U8", 1, at::kByte},
    {"I8", 1, at::kChar},
    {"I16", 2, at::kShort},
    {"I32", 4, at::kInt},
    {"I64", 8, at::kLong},
    {"F16", 2, at::kHalf},
    {"BF16", 2, at::kBFloat16},
    {"F32", 4, at::kFloat},
    {"F64", 8, at::kDouble},
#if FSDPP_TORCH_AT_LEAST(2, 1)
    {"F8_E5M2", 1, at::kFloat8_e5m2},
    {"F8_E4M3", 1, at::kFloat8_e4m3fn},
#else
    {"F8_E5M2", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt},
#endif
    {"F8_E8M0", 1, std::nullopt},
#if FSDPP_TORCH_AT_LEAST(2, 3)
    {"U16", 2, at::kUInt16},
    {"U32", 4, at::kUInt32},
    {"U64", 8, at::kUInt64},
#else
    {"U16", 2, std::nullopt},
    {"U32", 4, std::nullopt},
    {"U64", 8, std::nullopt},
#endif
  };
  return specs;
}

const DtypeSpec* find_dtype(const std::string& name) {
  for (const auto& spec : dtype_specs())
    if (name == spec.name) return &spec;
  return nullptr;
}

std::string known_dtype_list() {
  std::string out;
  for (const auto& spec : dtype_specs()) out += (out.empty() ? "" : ", ") + std::string(spec.name);
  return out;
}

const char* dtype_name_of(at::ScalarType type) {
  for (const auto& spec : dtype_specs())
    if (spec.scalar_type == type) return spec.name;
  return nullptr;
}

// ---- JSON with duplicate-key detection -----------------------------------------------------

// nlohmann keeps the last of duplicate keys silently; the spec forbids duplicates ("Duplicate
// keys are disallowed"), so the parser callback records the first one it sees, at any depth.
// It also drops, and flags in *too_deep, arrays and objects nested deeper than the reference
// reader's JSON parser allows (serde_json's recursion limit, 128): nlohmann parses any depth,
// but printing or copying the result recurses once per level and a crafted header would
// overflow the stack. Throws json::parse_error for malformed text.
// Json is nlohmann::json or nlohmann::ordered_json (which keeps the file's key order).
constexpr int kMaxJsonDepth = 128;

template <typename Json>
Json parse_rejecting_duplicates(const std::string& text, std::string* duplicate_key, bool* too_deep) {
  std::vector<std::set<std::string>> open_objects;
  auto callback = [&](int depth, typename Json::parse_event_t event, Json& parsed) {
    const bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
    if (opens && depth > kMaxJsonDepth) {
      *too_deep = true;
      return false;  // the value is parsed but not kept
    }
    if (event == Json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == Json::parse_event_t::key && !open_objects.empty()) {
      const auto& key = parsed.template get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && duplicate_key->empty()) *duplicate_key = key;
    }
    return true;
  };
  return Json::parse(text, callback);
}

// ---- the mapping -------------------------------------------------------------------------------

std::shared_ptr<const Mapping> map_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail_file(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail_file(path, "not a regular file");
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->size = static_cast<uint64_t>(st.st_size);
  if (mapping->size < 8) {
    ::close(fd);
    fail_file(path, "file is " + std::to_string(mapping->size) + " bytes, shorter than the 8-byte header length field");
  }
  void* addr = ::mmap(nullptr, mapping->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (addr == MAP_FAILED) fail_file(path, std::string("mmap failed: ") + std::strerror(err));
  mapping->bytes = static_cast<const uint8_t*>(addr);
  return mapping;
}

uint64_t read_le_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// numel * element_bytes, or nullopt on overflow / negative dims.
std::optional<uint64_t> byte_size_of(const std::vector<int64_t>& shape, uint64_t element_bytes) {
  unsigned __int128 bytes = element_bytes;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    bytes *= static_cast<uint64_t>(d);
    if (bytes > std::numeric_limits<uint64_t>::max()) return std::nullopt;
  }
  return static_cast<uint64_t>(bytes);
}

// One header entry, checked field by field (no unknown fields).
TensorInfo parse_tensor_entry(const fs::path& path, const std::string& name, const nlohmann::ordered_json& entry) {
  auto bad = [&](const std::string& problem) -> void { fail_file(path, "tensor " + in_quotes(name) + ": " + problem); };
  if (!entry.is_object()) bad("entry is " + entry.dump() + ", expected an object with dtype, shape, data_offsets");
  for (const auto& [key, value] : entry.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets") bad("unknown field " + in_quotes(key));
  TensorInfo info;
  info.name = name;
  if (!entry.contains("dtype") || !entry["dtype"].is_string()) bad("missing string field 'dtype'");
  info.dtype = entry["dtype"].get<std::string>();
  if (!entry.contains("shape") || !entry["shape"].is_array()) bad("missing array field 'shape'");
  for (const auto& dim : entry["shape"]) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad("shape " + entry["shape"].dump() + " has an entry that is not a non-negative integer");
    info.shape.push_back(dim.get<int64_t>());
  }
  const nlohmann::ordered_json* offsets = entry.contains("data_offsets") ? &entry["data_offsets"] : nullptr;
  if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    bad("'data_offsets' must be [begin, end] of non-negative integers");
  info.begin = (*offsets)[0].get<uint64_t>();
  info.end = (*offsets)[1].get<uint64_t>();
  return info;
}

}  // namespace

// ---- SafetensorsFile ---------------------------------------------------------------------

struct SafetensorsFile::State {
  fs::path path;
  std::shared_ptr<const Mapping> mapping;
  uint64_t data_start = 0;  // 8 + header length
  uint64_t data_bytes = 0;
  std::vector<TensorInfo> tensors;  // sorted by data offset, ties in header order
  std::unordered_map<std::string, size_t> by_name;
  std::map<std::string, std::string> metadata;
};

SafetensorsFile::SafetensorsFile(std::shared_ptr<const State> state) : state_(std::move(state)) {}

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  auto state = std::make_shared<State>();
  state->path = path;
  state->mapping = map_file(path);
  const uint64_t file_bytes = state->mapping->size;
  const uint8_t* base = state->mapping->bytes;

  // Bytes 0..7: header length N, unsigned 64-bit little-endian.
  const uint64_t header_bytes = read_le_u64(base);
  if (header_bytes > file_bytes - 8)
    fail_file(path, "header length " + std::to_string(header_bytes) + " is larger than the " +
                        std::to_string(file_bytes - 8) + " bytes that follow it (file size " +
                        std::to_string(file_bytes) + ")");
  if (header_bytes > kMaxHeaderBytes)
    fail_file(path,
              "header length " + std::to_string(header_bytes) + " exceeds the 100 MB limit of the reference reader");
  state->data_start = 8 + header_bytes;
  state->data_bytes = file_bytes - state->data_start;

  // Bytes 8..8+N: UTF-8 JSON that must begin with '{' and may be padded with spaces.
  std::string header(reinterpret_cast<const char*>(base + 8), header_bytes);
  if (header.empty() || header[0] != '{')
    fail_file(path, "header does not start with '{' (the spec requires a JSON object at byte 8)");
  // Key order is kept so that tensors sharing an offset (empty ones) list in header order.
  nlohmann::ordered_json root;
  std::string duplicate;
  bool too_deep = false;
  try {
    root = parse_rejecting_duplicates<nlohmann::ordered_json>(header, &duplicate, &too_deep);
  } catch (const nlohmann::ordered_json::exception& e) {
    fail_file(path, "header is not valid JSON (header starts at file byte 8): " + std::string(e.what()));
  }
  if (too_deep)
    fail_file(path, "header nests JSON deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels (the reference reader's limit)");
  if (!duplicate.empty()) fail_file(path, "header has duplicate key " + in_quotes(duplicate));
  if (!root.is_object()) fail_file(path, "header is not a JSON object");

  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      // "A special key __metadata__ is allowed to contain free form string-to-string map."
      if (!value.is_object()) fail_file(path, "__metadata__ is not an object of strings");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string())
          fail_file(path, "__metadata__ value of " + in_quotes(mkey) + " is " + mvalue.dump() + ", not a string");
        state->metadata[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    state->tensors.push_back(parse_tensor_entry(path, key, value));
  }

  // Per tensor: known dtype, offsets inside the buffer, byte count == numel * dtype size.
  for (const auto& t : state->tensors) {
    const std::string where = "tensor " + in_quotes(t.name) + ": ";
    const DtypeSpec* spec = find_dtype(t.dtype);
    if (spec == nullptr)
      fail_file(path, where + "unknown dtype " + in_quotes(t.dtype) + " (known: " + known_dtype_list() + ")");
    if (t.begin > t.end)
      fail_file(path, where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                          "] end before they begin");
    if (t.end > state->data_bytes)
      fail_file(path, where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                          "] go beyond the end of the data buffer (" + std::to_string(state->data_bytes) + " bytes)");
    auto expected = byte_size_of(t.shape, spec->element_bytes);
    if (!expected || *expected != t.byte_size())
      fail_file(path, where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] hold " +
                          std::to_string(t.byte_size()) + " bytes but shape " + json(t.shape).dump() + " of " +
                          t.dtype + " needs " +
                          (expected ? std::to_string(*expected) : std::string("an overflowing count of")) + " bytes");
  }

  // The buffer must be covered exactly: sorted by offset, each tensor starts where the
  // previous one ended, and the last ends at the end of the file ("The byte buffer needs to
  // be entirely indexed, and cannot contain holes").
  std::stable_sort(state->tensors.begin(), state->tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& t : state->tensors) {
    if (t.begin < covered)
      fail_file(path, "tensor " + in_quotes(t.name) + " at data_offsets [" + std::to_string(t.begin) + ", " +
                          std::to_string(t.end) + "] overlaps tensor " + in_quotes(previous->name) + " ending at " +
                          std::to_string(covered));
    if (t.begin > covered)
      fail_file(path, "hole in the data buffer: bytes [" + std::to_string(covered) + ", " + std::to_string(t.begin) +
                          ") before tensor " + in_quotes(t.name) + " belong to no tensor");
    covered = t.end;
    previous = &t;
  }
  if (covered != state->data_bytes)
    fail_file(path, "hole in the data buffer: bytes [" + std::to_string(covered) + ", " +
                        std::to_string(state->data_bytes) + ") at the end belong to no tensor");

  for (size_t i = 0; i < state->tensors.size(); ++i) state->by_name.emplace(state->tensors[i].name, i);
  return SafetensorsFile(std::move(state));
}

const fs::path& SafetensorsFile::path() const { return state_->path; }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(state_->tensors.size());
  for (const auto& t : state_->tensors) out.push_back(t.name);
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const { return state_->by_name.count(name) != 0; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = state_->by_name.find(name);
  if (it == state_->by_name.end())
    fail_file(state_->path, "no tensor named " + in_quotes(name) + " (the file has " +
                                std::to_string(state_->tensors.size()) + " tensors)");
  return state_->tensors[it->second];
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return state_->metadata; }

uint64_t SafetensorsFile::data_bytes() const { return state_->data_bytes; }

namespace {

at::ScalarType torch_type_or_throw(const fs::path& path, const TensorInfo& info) {
  const DtypeSpec* spec = find_dtype(info.dtype);  // validated at open()
  if (!spec->scalar_type)
    fail_file(path, "tensor " + in_quotes(info.name) + " has dtype " + info.dtype + ", which LibTorch " +
                        compat::torch_version_string() + " cannot represent");
  return *spec->scalar_type;
}

}  // namespace

at::Tensor SafetensorsFile::copy_tensor(const std::string& name) const {
  const TensorInfo& t = info(name);
  at::Tensor out = at::empty(t.shape, at::TensorOptions().dtype(torch_type_or_throw(state_->path, t)));
  if (t.byte_size() > 0)
    std::memcpy(out.data_ptr(), state_->mapping->bytes + state_->data_start + t.begin, t.byte_size());
  return out;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& t = info(name);
  const at::ScalarType type = torch_type_or_throw(state_->path, t);
  const uint8_t* data = state_->mapping->bytes + state_->data_start + t.begin;
  const auto element_bytes = static_cast<uintptr_t>(c10::elementSize(type));
  if (t.byte_size() == 0 || reinterpret_cast<uintptr_t>(data) % element_bytes != 0) return copy_tensor(name);
  // The deleter owns a reference to the mapping: the view keeps it alive, nothing else.
  std::shared_ptr<const Mapping> keep_alive = state_->mapping;
  return at::from_blob(
      const_cast<uint8_t*>(data), t.shape, [keep_alive](void*) {}, at::TensorOptions().dtype(type));
}

// ---- writer --------------------------------------------------------------------------------

namespace {

// A file written under a temporary name beside `path` and renamed over it by commit();
// removed if destroyed uncommitted (an exception on the way). Same protocol as
// write_file_atomic, but streamed so a large file is never held in memory.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(fs::path path) : path_(std::move(path)) {
    dir_ = path_.has_parent_path() ? path_.parent_path() : fs::path(".");
    tmp_ = dir_ / ("." + path_.filename().string() + ".tmp." + std::to_string(::getpid()));
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("open " + tmp_.string());
  }
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  void write(const void* data, uint64_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (bytes > 0) {
      // One write() moves at most ~2 GiB on Linux; ask for 1 GiB at a time.
      ssize_t n = ::write(fd_, p, std::min<uint64_t>(bytes, uint64_t(1) << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("write");
      p += n;
      bytes -= static_cast<uint64_t>(n);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0) fail("fsync");
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close");
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename");
    committed_ = true;
    int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);  // makes the rename durable
      ::close(dfd);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& step) {
    throw std::runtime_error("cannot write safetensors file " + path_.string() + ": " + step +
                             " failed: " + std::strerror(errno));
  }
  fs::path path_, dir_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

namespace {

StreamedTensors streamed(const NamedTensors& tensors) {
  StreamedTensors out;
  for (const auto& [name, t] : tensors)
    out.push_back({name, t.defined() ? t.sizes().vec() : std::vector<int64_t>{},
                   t.defined() ? t.scalar_type() : at::kFloat, [t = t] { return t; }});
  return out;
}

uint64_t byte_size(const StreamedTensor& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n * static_cast<uint64_t>(c10::elementSize(t.dtype));
}

}  // namespace

void write_safetensors(const fs::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  for (const auto& [name, t] : tensors)
    if (!t.defined())
      throw std::runtime_error("cannot write safetensors file " + path.string() + ": tensor " + in_quotes(name) +
                               " is undefined");
  write_safetensors_streamed(path, streamed(tensors), metadata);
}

void write_safetensors_streamed(const fs::path& path, const StreamedTensors& tensors,
                                const std::map<std::string, std::string>& metadata) {
  auto bad = [&](const std::string& problem) -> void {
    throw std::runtime_error("cannot write safetensors file " + path.string() + ": " + problem);
  };

  // Header: {"__metadata__": {...}, name: {"dtype", "shape", "data_offsets"}, ...}, keys in
  // the order HF's serializer emits them, compact, then spaces up to a multiple of 8 bytes
  // (HF pads so the data buffer, and with its dtype ordering every tensor, is aligned).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::string& name = t.name;
    if (name == "__metadata__") bad("'__metadata__' is reserved and cannot name a tensor");
    if (!seen.insert(name).second) bad("duplicate tensor name " + in_quotes(name));
    const char* dtype = dtype_name_of(t.dtype);
    if (dtype == nullptr)
      bad("tensor " + in_quotes(name) + " has dtype " + std::string(c10::toString(t.dtype)) +
          ", which safetensors cannot store");
    const uint64_t bytes = byte_size(t);
    header[name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(dir)) bad("folder " + dir.string() + " does not exist");
  AtomicFileWriter out(path);
  uint8_t length_le[8];
  for (int i = 0; i < 8; ++i) length_le[i] = static_cast<uint8_t>(uint64_t(header_text.size()) >> (8 * i));
  out.write(length_le, 8);
  out.write(header_text.data(), header_text.size());
  for (const auto& spec : tensors) {
    // One tensor at a time in contiguous CPU memory (a copy only if it is not already).
    at::Tensor t = spec.produce();
    if (!t.defined() || t.sizes().vec() != spec.shape || t.scalar_type() != spec.dtype)
      bad("tensor " + in_quotes(spec.name) + " was produced with another shape or dtype than announced");
    at::Tensor c = t.detach();
    if (!c.device().is_cpu()) c = c.cpu();
    c = c.resolve_conj().resolve_neg().contiguous();
    out.write(c.data_ptr(), static_cast<uint64_t>(c.numel()) * static_cast<uint64_t>(c.element_size()));
  }
  out.commit();
}

// ---- sharded checkpoints -------------------------------------------------------------------

namespace {

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_index(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail_index(path, "read failed");
  return text.str();
}

// HF shard names: model-00001-of-00003.safetensors (transformers' SAFE_WEIGHTS_NAME with
// the "-{i:05d}-of-{n:05d}" suffix).
std::string shard_file_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

struct SafetensorsIndex::State {
  fs::path path;                                  // index json or single file
  fs::path dir;                                   // where shard names are resolved
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::optional<uint64_t> total_size;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> opened;  // by shard file name
};

SafetensorsIndex::SafetensorsIndex(std::shared_ptr<State> state) : state_(std::move(state)) {}

SafetensorsIndex SafetensorsIndex::open(const fs::path& path) {
  auto state = std::make_shared<State>();
  state->path = fs::is_directory(path) ? path / kIndexFileName : path;
  state->dir = state->path.has_parent_path() ? state->path.parent_path() : fs::path(".");
  const fs::path& index_path = state->path;
  if (!fs::exists(index_path)) fail_index(index_path, "no such file");

  json root;
  std::string duplicate;
  bool too_deep = false;
  try {
    root = parse_rejecting_duplicates<json>(read_text_file(index_path), &duplicate, &too_deep);
  } catch (const json::exception& e) {
    fail_index(index_path, "not valid JSON: " + std::string(e.what()));
  }
  if (too_deep) fail_index(index_path, "nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  if (!duplicate.empty()) fail_index(index_path, "duplicate key " + in_quotes(duplicate));
  if (!root.is_object()) fail_index(index_path, "top level is not a JSON object");
  if (!root.contains("weight_map") || !root["weight_map"].is_object())
    fail_index(index_path, "missing object 'weight_map' (tensor name -> shard file)");
  for (const auto& [name, shard] : root["weight_map"].items()) {
    if (!shard.is_string())
      fail_index(index_path, "weight_map entry of " + in_quotes(name) + " is not a file name string");
    const auto file = shard.get<std::string>();
    // Shards live beside the index: a bare file name, never a path out of the folder.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail_index(index_path, "weight_map entry of " + in_quotes(name) + " is " + in_quotes(file) + ", not a file name");
    state->weight_map.emplace(name, file);
  }
  if (root.contains("metadata")) {
    const json& meta = root["metadata"];
    if (!meta.is_object()) fail_index(index_path, "'metadata' is not an object");
    if (meta.contains("total_size")) {
      const json& total = meta["total_size"];
      // Integral; some writers store it as a float such as 1.6e10.
      if (total.is_number_unsigned()) {
        state->total_size = total.get<uint64_t>();
      } else if (total.is_number_float() && total.get<double>() >= 0 &&
                 total.get<double>() == static_cast<double>(static_cast<uint64_t>(total.get<double>()))) {
        state->total_size = static_cast<uint64_t>(total.get<double>());
      } else {
        fail_index(index_path, "metadata.total_size is " + total.dump() + ", not a non-negative integer");
      }
    }
  }

  // Every shard must be there now; reading one waits for its first tensor.
  std::map<std::string, std::string> first_tensor_of_shard;
  for (const auto& [name, file] : state->weight_map) first_tensor_of_shard.emplace(file, name);
  for (const auto& [file, name] : first_tensor_of_shard)
    if (!fs::is_regular_file(state->dir / file))
      fail_index(index_path, "shard " + in_quotes(file) + " (holding tensor " + in_quotes(name) +
                                 ") is missing: no file " + (state->dir / file).string());
  return SafetensorsIndex(std::move(state));
}

SafetensorsIndex SafetensorsIndex::from_file(const fs::path& safetensors_path) {
  auto file = std::make_shared<SafetensorsFile>(SafetensorsFile::open(safetensors_path));
  auto state = std::make_shared<State>();
  state->path = safetensors_path;
  state->dir = safetensors_path.has_parent_path() ? safetensors_path.parent_path() : fs::path(".");
  const std::string file_name = safetensors_path.filename().string();
  for (const auto& name : file->names()) state->weight_map.emplace(name, file_name);
  state->opened.emplace(file_name, std::move(file));
  return SafetensorsIndex(std::move(state));
}

const fs::path& SafetensorsIndex::path() const { return state_->path; }

std::vector<std::string> SafetensorsIndex::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : state_->weight_map) out.push_back(name);
  return out;
}

bool SafetensorsIndex::contains(const std::string& name) const { return state_->weight_map.count(name) != 0; }

fs::path SafetensorsIndex::shard_path(const std::string& name) const {
  auto it = state_->weight_map.find(name);
  if (it == state_->weight_map.end())
    throw std::runtime_error("safetensors checkpoint " + state_->path.string() + ": no tensor named " +
                             in_quotes(name));
  return state_->dir / it->second;
}

std::vector<fs::path> SafetensorsIndex::shard_paths() const {
  std::set<std::string> files;
  for (const auto& [name, file] : state_->weight_map) files.insert(file);
  std::vector<fs::path> out;
  out.reserve(files.size());
  for (const auto& file : files) out.push_back(state_->dir / file);
  return out;
}

std::optional<uint64_t> SafetensorsIndex::total_size() const { return state_->total_size; }

const SafetensorsFile& SafetensorsIndex::shard_for(const std::string& name) const {
  const fs::path shard = shard_path(name);  // throws for unknown names
  const std::string file = shard.filename().string();
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->opened.find(file);
  if (it == state_->opened.end()) {
    auto opened = std::make_shared<SafetensorsFile>(SafetensorsFile::open(shard));
    // The index promises these tensors are in this shard; hold it to that once, here.
    for (const auto& [tensor_name, tensor_file] : state_->weight_map)
      if (tensor_file == file && !opened->contains(tensor_name))
        fail_index(state_->path, "maps tensor " + in_quotes(tensor_name) + " to shard " + in_quotes(file) +
                                     ", which does not contain it");
    it = state_->opened.emplace(file, std::move(opened)).first;
  }
  return *it->second;  // entries are never erased, so the reference stays valid
}

TensorInfo SafetensorsIndex::info(const std::string& name) const { return shard_for(name).info(name); }

at::Tensor SafetensorsIndex::tensor(const std::string& name) const { return shard_for(name).tensor(name); }

at::Tensor SafetensorsIndex::copy_tensor(const std::string& name) const { return shard_for(name).copy_tensor(name); }

SafetensorsIndex load_checkpoint_dir(const fs::path& dir) {
  if (!fs::is_directory(dir))
    throw std::runtime_error("safetensors checkpoint folder " + dir.string() + ": not a folder");
  const bool single = fs::exists(dir / kSingleFileName);
  const bool sharded = fs::exists(dir / kIndexFileName);
  if (single && sharded)
    throw std::runtime_error("safetensors checkpoint folder " + dir.string() + ": holds both " + kSingleFileName +
                             " and " + kIndexFileName + "; remove the stale one");
  if (!single && !sharded)
    throw std::runtime_error("safetensors checkpoint folder " + dir.string() + ": holds neither " + kSingleFileName +
                             " nor " + kIndexFileName);
  return single ? SafetensorsIndex::from_file(dir / kSingleFileName) : SafetensorsIndex::open(dir / kIndexFileName);
}

ShardedWrite write_sharded_safetensors(const fs::path& dir, const NamedTensors& tensors, uint64_t max_shard_bytes,
                                       const std::map<std::string, std::string>& metadata) {
  for (const auto& [name, t] : tensors)
    if (!t.defined())
      throw std::runtime_error("cannot write sharded safetensors to " + dir.string() + ": tensor " + in_quotes(name) +
                               " is undefined");
  return write_sharded_safetensors_streamed(dir, streamed(tensors), max_shard_bytes, metadata);
}

ShardedWrite write_sharded_safetensors_streamed(const fs::path& dir, const StreamedTensors& tensors,
                                                uint64_t max_shard_bytes,
                                                const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0)
    throw std::runtime_error("cannot write sharded safetensors to " + dir.string() + ": max_shard_bytes is 0");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create safetensors checkpoint folder " + dir.string() + ": " + ec.message());

  // Split as huggingface_hub's split_torch_state_dict_into_shards: a tensor above the limit
  // is a shard alone; otherwise close the shard when this tensor would tip it over.
  std::vector<StreamedTensors> shards(1);
  uint64_t shard_bytes = 0;
  ShardedWrite result;
  for (const auto& named : tensors) {
    const uint64_t bytes = byte_size(named);
    result.total_size += bytes;
    if (!shards.back().empty() && (bytes > max_shard_bytes || shard_bytes + bytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(named);
    shard_bytes += bytes;
    if (bytes > max_shard_bytes) {  // nothing joins an oversized tensor
      shards.emplace_back();
      shard_bytes = 0;
    }
  }
  if (shards.size() > 1 && shards.back().empty()) shards.pop_back();

  const size_t n = shards.size();
  json weight_map = json::object();
  for (size_t i = 0; i < n; ++i) {
    const std::string file = n == 1 ? kSingleFileName : shard_file_name(i, n);
    write_safetensors_streamed(dir / file, shards[i], metadata);
    result.shard_paths.push_back(dir / file);
    for (const auto& t : shards[i]) weight_map[t.name] = file;
  }
  if (n > 1) {
    // Same layout as transformers' save_pretrained: sorted keys, 2-space indent.
    json index = {{"metadata", {{"total_size", result.total_size}}}, {"weight_map", weight_map}};
    result.index_path = dir / kIndexFileName;
    write_file_atomic(*result.index_path, index.dump(2) + "\n");
  }

  // Now that the new checkpoint is complete, remove files of an older one that the loader
  // would otherwise see (the other layout) or that nothing references (other shard counts).
  static const std::regex shard_pattern(R"(model-\d{5}-of-\d{5}\.safetensors)");
  std::set<std::string> written;
  for (const auto& p : result.shard_paths) written.insert(p.filename().string());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const bool stale =
        written.count(name) == 0 && (std::regex_match(name, shard_pattern) || (n > 1 && name == kSingleFileName) ||
                                     (n == 1 && name == kIndexFileName));
    if (stale) fs::remove(entry.path(), ec);
  }
  return result;
}

}  // namespace fsdpp::io
