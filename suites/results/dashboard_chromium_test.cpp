// The dashboard in a real browser: `fsdpp results dashboard` over a four-run history with
// a trend and a regression, loaded in headless Chromium. It must log no console message or
// uncaught exception, and its screenshot must show the trend lines inside the charts' plot
// areas. Negative controls prove each check can fail: a deliberate console.error and an
// uncaught exception are caught, and the same page without its charts fails the pixel
// check. Skipped, with the reason, where Chromium is not installed (ci/setup.sh installs it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/io/atomic_file.h"
#include "harness/results/dashboard.h"
#include "harness/results/results_document.h"
#include "harness/testing/headless_chromium.h"
#include "harness/testing/png_image.h"
#include "harness/testing/synthetic_results.h"
#include "harness/testing/temp_dir.h"
#include "suites/cli/fsdpp_binary.h"

namespace fsdpp {
namespace {

namespace fs = std::filesystem;
using harness::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int kWidth = 1280, kHeight = 1600;
// A trend line 2.5 px wide across a ~430 px plot is ~1000 pixels of its colour; all four
// cells' charts are on screen, so ask for at least two lines' worth of each colour.
constexpr size_t kMinLinePixels = 2000;

struct Rgb {
  int r, g, b;
};

Rgb parse_colour(const std::string& hex) {  // "#rrggbb"
  return {std::stoi(hex.substr(1, 2), nullptr, 16), std::stoi(hex.substr(3, 2), nullptr, 16),
          std::stoi(hex.substr(5, 2), nullptr, 16)};
}

bool near(const uint8_t* pixel, Rgb colour, int tolerance) {
  return std::abs(pixel[0] - colour.r) <= tolerance && std::abs(pixel[1] - colour.g) <= tolerance &&
         std::abs(pixel[2] - colour.b) <= tolerance;
}

// Pixels of `line` colour (anti-aliased: within 40 per channel) inside the bounding box of
// the charts' plot areas (the pixels of the plot fill, within 1: table borders anti-alias
// to nearly that colour); 0 when no plot area is visible.
size_t line_pixels_in_plot_areas(const harness::RgbImage& image, const std::string& line) {
  const Rgb fill = parse_colour(results::kChartPlotFill), stroke = parse_colour(line);
  int x0 = image.width, y0 = image.height, x1 = -1, y1 = -1;
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x)
      if (near(image.at(x, y), fill, 1))
        x0 = std::min(x0, x), y0 = std::min(y0, y), x1 = std::max(x1, x), y1 = std::max(y1, y);
  size_t count = 0;
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) count += near(image.at(x, y), stroke, 40) ? 1 : 0;
  return count;
}

class DashboardInChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = harness::find_chromium();
    if (chromium_.empty())
      GTEST_SKIP() << "Chromium not found (no chromium, chromium-browser or google-chrome on PATH, or "
                      "FSDPP_CHROMIUM names no file): apt-get install chromium (ci/setup.sh does)";
    for (const auto& doc : harness::trend_history("0a1b2c3d4e5f6789"))
      results::append_to_history(dir_ / "history", doc);
    page_ = dir_ / "dashboard.html";
    auto [code, output] = harness::run_shell(kFsdpp + " results dashboard --history " + (dir_ / "history").string() +
                                             " --out " + page_.string());
    ASSERT_EQ(code, 0) << output;
    std::ifstream in(page_);
    html_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_THAT(html_, HasSubstr("<tr class=\"regression\">"));
  }

  // `html` saved as `name` beside the dashboard.
  fs::path variant(const std::string& name, const std::string& html) {
    io::write_file_atomic(dir_ / name, html);
    return dir_ / name;
  }

  std::string chromium_;
  TempDir dir_{"dashboard-chromium"};
  fs::path page_;
  std::string html_;
};

TEST_F(DashboardInChromium, RunsItsScriptWithoutConsoleErrors) {
  const auto run = harness::chromium_dump_dom(chromium_, page_, dir_.path());
  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_THAT(harness::console_problems(run.log), IsEmpty()) << run.log;
  EXPECT_THAT(run.dom, HasSubstr("data-ready=\"1\""));  // the inline script ran to its end
  EXPECT_THAT(run.dom, HasSubstr("<tr class=\"regression\">"));
}

TEST_F(DashboardInChromium, ConsoleCheckCatchesADeliberateErrorAndAnUncaughtException) {
  std::string with_error = html_;
  with_error.insert(with_error.rfind("</body>"), "<script>console.error('deliberate negative control');</script>");
  const auto logged = harness::chromium_dump_dom(chromium_, variant("console-error.html", with_error), dir_.path());
  ASSERT_EQ(logged.exit_code, 0) << logged.log;
  EXPECT_THAT(harness::console_problems(logged.log), ElementsAre(HasSubstr("deliberate negative control")))
      << logged.log;

  std::string with_throw = html_;
  with_throw.insert(with_throw.rfind("</body>"), "<script>null.deliberate();</script>");
  const auto thrown = harness::chromium_dump_dom(chromium_, variant("uncaught.html", with_throw), dir_.path());
  ASSERT_EQ(thrown.exit_code, 0) << thrown.log;
  EXPECT_THAT(harness::console_problems(thrown.log), ElementsAre(HasSubstr("Uncaught TypeError"))) << thrown.log;
}

TEST_F(DashboardInChromium, ScreenshotShowsTheTrendLinesInsideTheCharts) {
  const fs::path png = dir_ / "dashboard.png";
  const auto run = harness::chromium_screenshot(chromium_, page_, png, kWidth, kHeight, dir_.path());
  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_THAT(harness::console_problems(run.log), IsEmpty()) << run.log;
  const auto image = harness::read_png(png);
  ASSERT_EQ(image.width, kWidth);
  ASSERT_EQ(image.height, kHeight);
  EXPECT_GE(line_pixels_in_plot_areas(image, results::kTokensChartStroke), kMinLinePixels);
  EXPECT_GE(line_pixels_in_plot_areas(image, results::kStepChartStroke), kMinLinePixels);
}

TEST_F(DashboardInChromium, ScreenshotCheckFailsForThePageWithoutItsCharts) {
  std::string without_charts = html_;
  for (size_t at; (at = without_charts.find("<svg class=\"chart\"")) != std::string::npos;)
    without_charts.erase(at, without_charts.find("</svg>", at) + 6 - at);
  ASSERT_EQ(without_charts.find("<svg"), std::string::npos);
  const fs::path png = dir_ / "no-charts.png";
  const auto run = harness::chromium_screenshot(chromium_, variant("no-charts.html", without_charts), png, kWidth,
                                                kHeight, dir_.path());
  ASSERT_EQ(run.exit_code, 0) << run.log;
  const auto image = harness::read_png(png);
  EXPECT_LT(line_pixels_in_plot_areas(image, results::kTokensChartStroke), kMinLinePixels);
  EXPECT_LT(line_pixels_in_plot_areas(image, results::kStepChartStroke), kMinLinePixels);
}

}  // namespace
}  // namespace fsdpp
