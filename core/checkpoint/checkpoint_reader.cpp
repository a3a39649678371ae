#include "core/checkpoint/checkpoint_reader.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>

#include "core/checkpoint/sha256.h"
#include "core/io/safetensors.h"

namespace fsdpp::checkpoint {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail_file(const fs::path& path, const std::string& problem) {
  throw std::runtime_error("checkpoint file " + path.string() + ": " + problem);
}

}  // namespace

struct CheckpointReader::State {
  fs::path dir;
  CheckpointIndex index;
  std::mutex mutex;
  std::map<std::string, io::SafetensorsFile> opened;  // verified and mapped, by file name
  std::set<std::string> hashed;

  [[noreturn]] void fail(const std::string& problem) const {
    throw std::runtime_error("checkpoint " + dir.string() + ": " + problem);
  }

  // Caller holds `mutex`.
  void verify_locked(const std::string& name) {
    if (hashed.count(name)) return;
    const fs::path path = dir / name;
    const CheckpointFile& expected = index.files.at(name);
    FileDigest digest = sha256_of_file(path);
    if (digest.bytes != expected.bytes)
      fail_file(path, std::to_string(digest.bytes) + " bytes, index.json says " + std::to_string(expected.bytes) +
                          " (truncated or rewritten)");
    if (digest.sha256 != expected.sha256)
      fail_file(path, "sha256 is " + digest.sha256 + ", index.json says " + expected.sha256 + " (file corrupt)");
    hashed.insert(name);
  }

  const io::SafetensorsFile& file(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = opened.find(name);
    if (it != opened.end()) return it->second;
    verify_locked(name);
    auto file = io::SafetensorsFile::open(dir / name);
    // The header must hold what the index says is there (a writer bug otherwise).
    for (const auto& [tensor_name, entry] : index.tensors)
      for (const auto& piece : entry.pieces) {
        if (piece.file != name) continue;
        if (!file.contains(tensor_name))
          fail_file(file.path(), "holds no tensor '" + tensor_name + "' (index.json puts rows [" +
                                     std::to_string(piece.begin) + ", " + std::to_string(piece.end) + ") there)");
        const auto& info = file.info(tensor_name);
        const auto want_shape = piece_shape(entry.shape, piece.rows());
        if (info.dtype != dtype_name(entry.dtype) || info.shape != want_shape)
          fail_file(file.path(), "tensor '" + tensor_name + "' is " + info.dtype + " " + shape_string(info.shape) +
                                     ", index.json says " + dtype_name(entry.dtype) + " " + shape_string(want_shape));
      }
    return opened.emplace(name, std::move(file)).first->second;
  }
};

CheckpointReader::CheckpointReader(std::shared_ptr<State> state) : state_(std::move(state)) {}

CheckpointReader CheckpointReader::open(const fs::path& dir) {
  auto state = std::make_shared<State>();
  state->dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) state->fail(fs::exists(dir, ec) ? "not a folder" : "missing");
  state->index = CheckpointIndex::read(dir / kIndexFileName);
  for (const auto& [name, expected] : state->index.files) {
    const fs::path path = dir / name;
    auto size = fs::file_size(path, ec);
    if (ec) fail_file(path, fs::exists(path) ? "cannot stat: " + ec.message() : "missing (index.json lists it)");
    if (size != expected.bytes)
      fail_file(path, std::to_string(size) + " bytes, index.json says " + std::to_string(expected.bytes) +
                          " (truncated or rewritten)");
  }
  return CheckpointReader(std::move(state));
}

const fs::path& CheckpointReader::dir() const { return state_->dir; }
const CheckpointIndex& CheckpointReader::index() const { return state_->index; }
bool CheckpointReader::contains(const std::string& name) const { return state_->index.tensors.count(name) > 0; }

const TensorEntry& CheckpointReader::tensor(const std::string& name) const {
  auto it = state_->index.tensors.find(name);
  if (it == state_->index.tensors.end()) state_->fail("has no tensor '" + name + "'");
  return it->second;
}

void CheckpointReader::read_rows(const std::string& name, int64_t first_row, at::Tensor out) const {
  const TensorEntry& entry = tensor(name);
  if (out.scalar_type() != entry.dtype)
    state_->fail("tensor '" + name + "' is " + dtype_name(entry.dtype) + ", cannot read it into a " +
                 c10::toString(out.scalar_type()) + " tensor");
  const int64_t rows = out.dim() == 0 ? 1 : out.size(0);
  const int64_t row_numel = entry.row_numel();
  if (out.numel() != rows * row_numel)
    state_->fail("tensor '" + name + "' " + shape_string(entry.shape) + ": cannot read " + std::to_string(rows) +
                 " rows into a tensor of shape " + shape_string(out.sizes().vec()));
  if (first_row < 0 || first_row + rows > entry.dim0())
    state_->fail("tensor '" + name + "' has rows [0, " + std::to_string(entry.dim0()) + "), asked for [" +
                 std::to_string(first_row) + ", " + std::to_string(first_row + rows) + ")");
  if (rows == 0 || row_numel == 0) return;

  at::NoGradGuard no_grad;
  const bool direct = out.is_cpu() && out.is_contiguous();
  at::Tensor dst = direct ? out.view({rows, row_numel}) : at::empty({rows, row_numel}, out.options().device(at::kCPU));
  const int64_t end_row = first_row + rows;
  for (const auto& piece : entry.pieces) {
    const int64_t lo = std::max(piece.begin, first_row), hi = std::min(piece.end, end_row);
    if (lo >= hi) continue;
    at::Tensor src = state_->file(piece.file).tensor(name).reshape({piece.rows(), row_numel});
    dst.narrow(0, lo - first_row, hi - lo).copy_(src.narrow(0, lo - piece.begin, hi - lo));
  }
  if (!direct) out.copy_(dst.view(out.sizes()));
}

at::Tensor CheckpointReader::read(const std::string& name) const {
  const TensorEntry& entry = tensor(name);
  at::Tensor out = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
  read_rows(name, 0, out);
  return out;
}

void CheckpointReader::verify_all() const {
  for (const auto& [name, file] : state_->index.files) state_->file(name);
}

}  // namespace fsdpp::checkpoint
