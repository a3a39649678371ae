#include "harness/testing/headless_chromium.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "harness/testing/temp_dir.h"

namespace fsdpp::harness {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

ChromiumRun run_chromium(const std::string& chromium, const std::string& mode_flags, const fs::path& page,
                         const fs::path& scratch, const std::string& tag) {
  const fs::path profile = scratch / ("profile-" + tag), out = scratch / (tag + ".out"), log = scratch / (tag + ".log");
  // In a subshell: run_shell appends its own 2>&1, which must not undo ours.
  const std::string command = "(timeout 120 " + quoted(chromium) +
                              " --headless=new --no-sandbox --disable-gpu --enable-logging=stderr --v=0"
                              " --no-first-run --no-default-browser-check --disable-extensions --hide-scrollbars"
                              " --user-data-dir=" +
                              quoted(profile.string()) + " " + mode_flags + " " +
                              quoted("file://" + fs::absolute(page).string()) + " >" + quoted(out.string()) + " 2>" +
                              quoted(log.string()) + ")";
  ChromiumRun run;
  run.exit_code = run_shell(command).first;
  run.log = read_text(log);
  run.dom = read_text(out);
  return run;
}

}  // namespace

std::string find_chromium() {
  if (const char* chosen = std::getenv("FSDPP_CHROMIUM"))
    return *chosen != '\0' && fs::exists(chosen) ? std::string(chosen) : std::string();
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    auto [code, output] = run_shell(std::string("command -v ") + name);
    if (code == 0) {
      while (!output.empty() && (output.back() == '\n' || output.back() == '\r')) output.pop_back();
      if (!output.empty()) return output;
    }
  }
  return "";
}

ChromiumRun chromium_dump_dom(const std::string& chromium, const fs::path& page, const fs::path& scratch) {
  return run_chromium(chromium, "--dump-dom", page, scratch, "dom-" + page.stem().string());
}

ChromiumRun chromium_screenshot(const std::string& chromium, const fs::path& page, const fs::path& png, int width,
                                int height, const fs::path& scratch) {
  const std::string flags = "--window-size=" + std::to_string(width) + "," + std::to_string(height) +
                            " --screenshot=" + quoted(fs::absolute(png).string());
  return run_chromium(chromium, flags, page, scratch, "shot-" + page.stem().string());
}

std::vector<std::string> console_problems(const std::string& log) {
  std::vector<std::string> problems;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);)
    if (line.find(":CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos)
      problems.push_back(line);
  return problems;
}

}  // namespace fsdpp::harness
