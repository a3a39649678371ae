// fuzz_brief: the fuzz step CI can afford. Every libFuzzer target of suites/fuzz, compiled
// into the main build (gcc, no sanitizers, the libraries the CLI links), reads for a few
// seconds: first each kept regression input, then each seed, then mutations of the seeds
// (harness/testing/byte_mutator.h) until --runs inputs or --seconds have gone by. Not
// coverage-guided and not sanitized: it catches a crash, an abort (an uncaught exception
// that is not a std::exception, a target's broken invariant) and an input read for over
// --timeout-s seconds. ci/fuzz.sh runs the same targets under libFuzzer, ASan and UBSan.
//
//   fuzz_brief TARGET [--fuzz-dir suites/fuzz] [--seconds 15] [--runs 50000] [--seed N]
//              [--timeout-s 10] [--findings DIR]
//
// A finding: the input is written to DIR/TARGET-finding (default ./fuzz-findings), one line
// names it on stderr, and the process dies by the signal (or exits 70 on a timeout). Bad
// usage: one line and exit 2. Nothing found: a summary line and exit 0.
// Each target's LLVMFuzzerTestOneInput and LLVMFuzzerInitialize are renamed at compile time
// to fsdpp_fuzz_one_input_TARGET and fsdpp_fuzz_initialize_TARGET (suites/CMakeLists.txt);
// fuzz_brief_targets.inc, generated there, lists the targets.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/testing/byte_mutator.h"

namespace fs = std::filesystem;

using OneInput = int (*)(const uint8_t*, size_t);
using Initialize = int (*)(int*, char***);

#define FSDPP_FUZZ_TARGET(name)                                                 \
  extern "C" int fsdpp_fuzz_one_input_##name(const uint8_t* data, size_t size); \
  extern "C" int fsdpp_fuzz_initialize_##name(int*, char***) __attribute__((weak));
#include "fuzz_brief_targets.inc"
#undef FSDPP_FUZZ_TARGET

namespace {

struct Target {
  std::string_view name;
  OneInput one_input;
  Initialize initialize;  // null where the target has none
};

// The driver's own check: a target with a planted defect that only a mutation reaches (its
// seed is "fsdpp-plant", its dictionary holds "ed"). suites/CMakeLists.txt runs it and
// expects the finding to be reported and kept.
extern "C" int planted_crash_one_input(const uint8_t* data, size_t size) {
  if (std::string_view(reinterpret_cast<const char*>(data), size).find("fsdpp-planted") != std::string_view::npos)
    std::abort();
  return 0;
}
constexpr std::string_view kPlantedCrash = "planted_crash";

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
#define FSDPP_FUZZ_TARGET(name) {#name, &fsdpp_fuzz_one_input_##name, &fsdpp_fuzz_initialize_##name},
#include "fuzz_brief_targets.inc"
#undef FSDPP_FUZZ_TARGET
      {kPlantedCrash, &planted_crash_one_input, nullptr},
  };
  return all;
}

struct Options {
  std::string target;
  fs::path fuzz_dir = "suites/fuzz";
  double seconds = 15;
  int64_t runs = 50000;
  uint64_t seed = std::random_device{}();
  unsigned timeout_s = 10;
  fs::path findings = "fuzz-findings";
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "fuzz_brief: %s\n", message.c_str());
  std::exit(2);
}

template <class T>
T parse_number(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const long double value = std::stold(text, &used);
    if (used != text.size() || value <= 0) throw std::invalid_argument(text);
    return static_cast<T>(value);
  } catch (const std::exception&) {
    usage_error(flag + " expects a positive number, got '" + text + "'");
  }
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (!options.target.empty()) usage_error("one TARGET expected, got '" + options.target + "' and '" + arg + "'");
      options.target = arg;
      continue;
    }
    if (i + 1 >= argc) usage_error(arg + " expects a value");
    const std::string value = argv[++i];
    if (arg == "--fuzz-dir")
      options.fuzz_dir = value;
    else if (arg == "--seconds")
      options.seconds = parse_number<double>(arg, value);
    else if (arg == "--runs")
      options.runs = parse_number<int64_t>(arg, value);
    else if (arg == "--seed")
      options.seed = parse_number<uint64_t>(arg, value);
    else if (arg == "--timeout-s")
      options.timeout_s = parse_number<unsigned>(arg, value);
    else if (arg == "--findings")
      options.findings = value;
    else
      usage_error("unknown flag '" + arg + "' (known: --fuzz-dir --seconds --runs --seed --timeout-s --findings)");
  }
  if (options.target.empty()) usage_error("usage: fuzz_brief TARGET [--fuzz-dir DIR] [--seconds S] [--runs N] ...");
  return options;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) usage_error(path.string() + ": cannot read this input");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every file under `dir`, sorted by name; none when `dir` does not exist.
std::vector<std::string> read_inputs(const fs::path& dir) {
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& entry : fs::recursive_directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> inputs;
  for (const auto& file : files) inputs.push_back(read_bytes(file));
  return inputs;
}

// What the signal handler needs, set up before any input is read: it may only call
// async-signal-safe functions, so the paths and messages are C strings made in advance.
struct FindingReport {
  std::string kept_path;
  std::string crash_line;
  std::string timeout_line;
  const std::string* current = nullptr;  // the input being read
} g_report;

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void keep_current_input() {
  if (g_report.current == nullptr) return;
  const int fd = ::open(g_report.kept_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  write_all(fd, g_report.current->data(), g_report.current->size());
  ::close(fd);
}

void on_finding(int signal_number) {
  keep_current_input();
  const std::string& line = signal_number == SIGALRM ? g_report.timeout_line : g_report.crash_line;
  write_all(STDERR_FILENO, line.data(), line.size());
  if (signal_number == SIGALRM) ::_exit(70);
  ::signal(signal_number, SIG_DFL);  // die by the signal itself once the handler returns
  ::raise(signal_number);
}

void install_finding_handlers() {
  // Its own stack: a stack overflow in a reader (deep nesting) must still be reported.
  static std::vector<char> alternate_stack(1 << 16);
  stack_t stack{};
  stack.ss_sp = alternate_stack.data();
  stack.ss_size = alternate_stack.size();
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_handler = on_finding;
  action.sa_flags = SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) ::sigaction(s, &action, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  const auto& all = targets();
  const auto target = std::find_if(all.begin(), all.end(), [&](const Target& t) { return t.name == options.target; });
  if (target == all.end()) {
    std::string known;
    for (const auto& t : all) known += (known.empty() ? "" : " ") + std::string(t.name);
    usage_error("unknown target '" + options.target + "' (known: " + known + ")");
  }

  std::vector<std::string> regressions, seeds, dictionary;
  if (target->name == kPlantedCrash) {
    seeds = {"fsdpp-plant"};
    dictionary = {"ed"};
  } else {
    regressions = read_inputs(options.fuzz_dir / "regressions" / options.target);
    seeds = read_inputs(options.fuzz_dir / "corpus" / options.target);
    if (seeds.empty()) usage_error((options.fuzz_dir / "corpus" / options.target).string() + ": no seed inputs");
    const fs::path dictionary_file = options.fuzz_dir / (options.target + ".dict");
    try {
      if (fs::exists(dictionary_file)) dictionary = fsdpp::harness::read_fuzz_dictionary(dictionary_file);
    } catch (const std::exception& e) {
      usage_error(e.what());
    }
  }
  size_t max_size = 4096;
  for (const auto& s : seeds) max_size = std::max(max_size, 2 * s.size());

  std::error_code ec;
  fs::create_directories(options.findings, ec);
  if (ec) usage_error(options.findings.string() + ": cannot create the findings folder: " + ec.message());
  g_report.kept_path = (options.findings / (options.target + "-finding")).string();
  g_report.crash_line = "fuzz_brief: FINDING in " + options.target + ": the input that crashed is kept in " +
                        g_report.kept_path + " (fuzz_brief " + options.target + " --seed " +
                        std::to_string(options.seed) + " reproduces it)\n";
  g_report.timeout_line = "fuzz_brief: FINDING in " + options.target + ": an input took over " +
                          std::to_string(options.timeout_s) + " s; it is kept in " + g_report.kept_path + "\n";
  install_finding_handlers();
  if (target->initialize != nullptr) target->initialize(&argc, &argv);

  const auto read_one = [&](const std::string& input) {
    g_report.current = &input;
    ::alarm(options.timeout_s);
    target->one_input(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    ::alarm(0);
    g_report.current = nullptr;
  };
  const auto start = std::chrono::steady_clock::now();
  for (const auto& input : regressions) read_one(input);
  for (const auto& input : seeds) read_one(input);
  fsdpp::harness::ByteMutator mutator(options.seed, dictionary);
  int64_t mutated = 0;
  double elapsed = 0;
  while (mutated < options.runs) {
    const std::string& base = seeds[mutator.below(seeds.size())];
    const std::string& other = seeds[mutator.below(seeds.size())];
    read_one(mutator.mutate(base, other, max_size));
    ++mutated;
    if (mutated % 64 == 0) {
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (elapsed >= options.seconds) break;
    }
  }
  elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "fuzz_brief: %s: no finding in %zu regression inputs, %zu seeds and %lld mutated inputs "
               "(%.1f s, %.0f inputs/s, %zu dictionary words, seed %llu)\n",
               options.target.c_str(), regressions.size(), seeds.size(), static_cast<long long>(mutated), elapsed,
               static_cast<double>(mutated) / std::max(elapsed, 1e-9), dictionary.size(),
               static_cast<unsigned long long>(options.seed));
  return 0;
}
