// What every fuzz target in suites/fuzz shares: where a reader that takes a path finds the
// input, how a multi-file input is cut into files, and the line between a reader rejecting
// its input (a std::exception: expected) and a finding (everything else).
//
// A finding is what libFuzzer and the sanitizers report: a crash, an ASan or UBSan report
// (UBSan is built not to recover, so it aborts), an uncaught exception that is not a
// std::exception, an abort(), a run over -timeout, or an allocation over -rss_limit_mb.
// check_invariant() adds one more: accepted input that breaks a promise of the reader's
// header (e.g. a tensor's bytes outside the file).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "harness/testing/temp_dir.h"

namespace fsdpp::fuzz {

// This process's scratch folder (mkdtemp under $TMPDIR, removed at a normal exit). Every
// run reuses the same file names in it, so the disk holds one input at a time.
inline const std::filesystem::path& scratch_dir() {
  static const harness::TempDir dir("fsdpp-fuzz");
  return dir.path();
}

// Writes `bytes` to `path` (truncating); aborts if the file system refuses: that is the
// harness failing, not the reader.
inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// The whole file (for seeds a target writes from files it made); aborts if unreadable.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) {
    std::fprintf(stderr, "fuzz harness: cannot read %s\n", path.c_str());
    std::abort();
  }
  return bytes;
}

// Writes the input to scratch_dir()/name and returns that path.
inline std::filesystem::path write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  auto path = scratch_dir() / name;
  write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  return path;
}

// The separator of inputs that hold several files, on a line of its own (seeds and
// dictionaries use the same text).
inline constexpr std::string_view kFileSeparator = "\n#--fsdpp-fuzz-next-file--#\n";

// Cuts `input` at the first `parts - 1` separators into exactly `parts` pieces; missing
// pieces are empty.
inline std::vector<std::string_view> split_files(std::string_view input, size_t parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const size_t at = input.find(kFileSeparator);
    if (at == std::string_view::npos) break;
    out.push_back(input.substr(0, at));
    input.remove_prefix(at + kFileSeparator.size());
  }
  out.push_back(input);
  out.resize(parts);
  return out;
}

// Runs `read`: a std::exception is the reader refusing the input, which is its contract.
// Anything else propagates to libFuzzer and is a finding. With FSDPP_FUZZ_VERBOSE=1 the
// refusal is printed (to see why a seed is rejected: `FSDPP_FUZZ_VERBOSE=1 T_fuzz seed`).
template <class Read>
void reader_may_reject(Read&& read) {
  static const bool verbose = std::getenv("FSDPP_FUZZ_VERBOSE") != nullptr;
  try {
    read();
  } catch (const std::exception& e) {
    if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
  }
}

// make_seeds.sh asks a target for seeds that only the target can make (ones matching the
// files it creates at start-up) by setting FSDPP_FUZZ_WRITE_SEED to an existing folder:
// the target copies its seed and the files it made there in LLVMFuzzerInitialize and
// exits. Null when not asked.
inline const char* seed_request() { return std::getenv("FSDPP_FUZZ_WRITE_SEED"); }

// A promise of the reader broken by input it accepted: report and abort (a finding).
inline void check_invariant(bool holds, const std::string& what) {
  if (holds) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

}  // namespace fsdpp::fuzz
