// Headless Chromium for suites that check how a page renders: load a local file, dump the
// DOM after its scripts ran, take a screenshot, and read console errors from its log.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fsdpp::harness {

// The browser to use: $FSDPP_CHROMIUM when set (an empty value or a missing file means
// none), else the first of chromium, chromium-browser, google-chrome on PATH. Empty when
// there is none; callers skip with the reason.
std::string find_chromium();

struct ChromiumRun {
  int exit_code = -1;
  std::string log;  // stderr with --enable-logging=stderr --v=0
  std::string dom;  // stdout: the serialized DOM (dump_dom only)
};

// Loads file://`page` (an absolute path) headless in a fresh profile under `scratch` and
// prints the DOM after the load event. Bounded by a 120 s timeout.
ChromiumRun chromium_dump_dom(const std::string& chromium, const std::filesystem::path& page,
                              const std::filesystem::path& scratch);

// Same, but writes a `width` x `height` screenshot of the viewport to `png`.
ChromiumRun chromium_screenshot(const std::string& chromium, const std::filesystem::path& page,
                                const std::filesystem::path& png, int width, int height,
                                const std::filesystem::path& scratch);

// The log lines that report console messages or uncaught exceptions. Chromium logs every
// console.* call and every uncaught error as "[...:INFO:CONSOLE:<line>] "<message>",
// source: <url> (<line>)" (older builds: "CONSOLE(<line>)"), whatever its level, so a page
// that must log nothing has a problem for each such line.
std::vector<std::string> console_problems(const std::string& log);

}  // namespace fsdpp::harness
