#include "core/data/token_dataset.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "core/data/token_file.h"

namespace fsdpp::data {

namespace fs = std::filesystem;

// A whole token file mapped read-only; the pages are shared with the page cache, so many
// ranks on one machine reading the same files cost one copy of RAM.
struct TokenDataset::Mapped {
  void* base = MAP_FAILED;
  size_t length = 0;
  const unsigned char* data = nullptr;  // the first token
  int bytes_per_token = 2;
  int64_t count = 0;

  explicit Mapped(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(path.string() + ": cannot open token file: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw std::runtime_error(path.string() + ": not a regular file (expected a token file)");
    }
    length = static_cast<size_t>(st.st_size);
    if (length > 0) base = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
    const int mmap_errno = errno;
    ::close(fd);
    if (length > 0 && base == MAP_FAILED)
      throw std::runtime_error(path.string() + ": cannot map token file: " + std::strerror(mmap_errno));
    try {
      const char* bytes = length > 0 ? static_cast<const char*>(base) : "";
      const auto layout =
          token_file_layout(path, std::string_view(bytes, std::min<size_t>(length, kTokenFileHeadBytes)), length);
      data = static_cast<const unsigned char*>(base) + layout.data_offset;
      bytes_per_token = layout.bytes_per_token;
      count = layout.token_count;
    } catch (...) {
      if (base != MAP_FAILED) ::munmap(base, length);
      throw;
    }
  }
  ~Mapped() {
    if (base != MAP_FAILED) ::munmap(base, length);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;

  int64_t at(int64_t i) const {
    if (bytes_per_token == 2) {
      uint16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      return v;
    }
    uint32_t v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
};

namespace {

bool is_token_file_name(const fs::path& p) { return p.extension() == ".tok" || p.extension() == ".bin"; }

// Regular files of `dir` whose names satisfy `keep`, sorted by name.
template <class Keep>
std::vector<fs::path> list_files(const fs::path& dir, Keep keep) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && keep(entry.path())) out.push_back(entry.path());
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  return out;
}

// One comma-separated entry of a spec -> its files, in order.
std::vector<fs::path> expand_entry(const std::string& entry) {
  const fs::path path(entry);
  const std::string name = path.filename().string();
  if (name.find_first_of("*?[") != std::string::npos) {
    const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
    if (!fs::is_directory(dir))
      throw std::runtime_error(entry + ": no such directory " + dir.string() +
                               " (expected a pattern in an existing directory)");
    auto files =
        list_files(dir, [&](const fs::path& p) { return ::fnmatch(name.c_str(), p.filename().c_str(), 0) == 0; });
    if (files.empty()) throw std::runtime_error(entry + ": no file matches (expected at least one token file)");
    return files;
  }
  if (!fs::exists(path))
    throw std::runtime_error(entry +
                             ": no such file or directory (expected a token file, a directory of them or a pattern)");
  if (!fs::is_directory(path)) return {path};
  auto files = list_files(path, is_token_file_name);
  if (files.empty())
    throw std::runtime_error(entry + ": no token files in this directory (expected *.tok or *.bin files)");
  return files;
}

}  // namespace

TokenDataset::TokenDataset() = default;
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;
TokenDataset& TokenDataset::operator=(TokenDataset&&) noexcept = default;
TokenDataset::~TokenDataset() = default;

TokenDataset TokenDataset::open(const std::string& spec) {
  std::vector<std::string> entries;
  for (size_t begin = 0;;) {
    const size_t comma = spec.find(',', begin);
    std::string entry = spec.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    if (entry.empty())
      throw std::runtime_error("'" + spec +
                               "': empty entry in the token data spec (expected files, directories or "
                               "patterns separated by commas)");
    entries.push_back(std::move(entry));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  std::vector<fs::path> files;
  for (const auto& entry : entries)
    for (auto& f : expand_entry(entry)) files.push_back(std::move(f));
  return open_files(files);
}

TokenDataset TokenDataset::open_files(const std::vector<fs::path>& files) {
  if (files.empty()) throw std::runtime_error("no token files given (expected at least one)");
  TokenDataset d;
  for (const auto& f : files) {
    d.mapped_.push_back(std::make_unique<Mapped>(f));
    d.files_.push_back(f);
    d.file_starts_.push_back(d.num_tokens_);
    d.num_tokens_ += d.mapped_.back()->count;
  }
  if (d.num_tokens_ == 0) {
    std::string names;
    for (const auto& f : files) names += (names.empty() ? "" : ",") + f.string();
    throw std::runtime_error(names + ": the token data is empty (expected at least one token)");
  }
  return d;
}

int64_t TokenDataset::max_token() const {
  if (max_token_ < 0)
    for (const auto& m : mapped_)
      for (int64_t i = 0; i < m->count; ++i) max_token_ = std::max(max_token_, m->at(i));
  return max_token_;
}

int64_t TokenDataset::num_windows(int64_t seq_len) const {
  if (seq_len < 1) throw std::invalid_argument("seq_len " + std::to_string(seq_len) + ": expected >= 1");
  return num_tokens_ < seq_len + 1 ? 0 : (num_tokens_ - 1) / seq_len;
}

void TokenDataset::require_window(int64_t seq_len, const std::string& what) const {
  if (num_windows(seq_len) < 1)
    throw std::runtime_error(what + ": " + std::to_string(num_tokens_) + " tokens, fewer than one window of seq_len " +
                             std::to_string(seq_len) + " (expected at least " + std::to_string(seq_len + 1) + ")");
}

void TokenDataset::copy_tokens(int64_t begin, int64_t count, int64_t* out) const {
  // The last file that starts at or before `begin` (empty files share their successor's start).
  size_t f = std::upper_bound(file_starts_.begin(), file_starts_.end(), begin) - file_starts_.begin() - 1;
  for (; count > 0; ++f) {
    const Mapped& m = *mapped_[f];
    const int64_t offset = begin - file_starts_[f];
    const int64_t take = std::min(count, m.count - offset);
    for (int64_t i = 0; i < take; ++i) out[i] = m.at(offset + i);
    out += take;
    begin += take;
    count -= take;
  }
}

std::pair<at::Tensor, at::Tensor> TokenDataset::windows(const std::vector<int64_t>& indices, int64_t seq_len) const {
  const int64_t n = num_windows(seq_len);
  auto rows = at::empty({static_cast<int64_t>(indices.size()), seq_len + 1}, at::kLong);
  int64_t* dst = rows.data_ptr<int64_t>();
  for (size_t r = 0; r < indices.size(); ++r) {
    const int64_t w = indices[r];
    if (w < 0 || w >= n)
      throw std::out_of_range("window " + std::to_string(w) + " is outside [0, " + std::to_string(n) +
                              ") for seq_len " + std::to_string(seq_len));
    copy_tokens(w * seq_len, seq_len + 1, dst + r * (seq_len + 1));
  }
  return {rows.narrow(1, 0, seq_len).contiguous(), rows.narrow(1, 1, seq_len).contiguous()};
}

at::Tensor TokenDataset::tokens(int64_t begin, int64_t count) const {
  if (begin < 0 || count < 0 || begin + count > num_tokens_)
    throw std::out_of_range("tokens [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                            ") are outside the dataset's " + std::to_string(num_tokens_));
  auto out = at::empty({count}, at::kLong);
  copy_tokens(begin, count, out.data_ptr<int64_t>());
  return out;
}

}  // namespace fsdpp::data
