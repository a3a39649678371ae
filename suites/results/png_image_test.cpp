// harness::read_png, which the dashboard's Chromium test reads its screenshots with:
// pixels as the encoder wrote them (fixtures from Python's zlib, not libpng), alpha
// dropped, and every failure named after the file.
#include "harness/testing/png_image.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/testing/results_samples.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::harness {
namespace {

using ::testing::ElementsAre;
using ::testing::StartsWith;

std::filesystem::path png_fixture(const std::string& name) { return results_fixture("png/" + name); }

std::vector<int> pixel(const RgbImage& image, int x, int y) {
  const uint8_t* p = image.at(x, y);
  return {p[0], p[1], p[2]};
}

std::string error_of(const std::filesystem::path& file) {
  try {
    read_png(file);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "read";
}

TEST(ReadPng, RgbaPixelsComeBackAsWrittenWithAlphaDropped) {
  const auto image = read_png(png_fixture("rgba-3x2.png"));
  ASSERT_EQ(image.width, 3);
  ASSERT_EQ(image.height, 2);
  EXPECT_THAT(pixel(image, 0, 0), ElementsAre(255, 0, 0));
  EXPECT_THAT(pixel(image, 1, 0), ElementsAre(0, 255, 0));   // alpha 128
  EXPECT_THAT(pixel(image, 2, 0), ElementsAre(0, 0, 255));   // alpha 0
  EXPECT_THAT(pixel(image, 0, 1), ElementsAre(10, 20, 30));  // the row under the Up filter
  EXPECT_THAT(pixel(image, 1, 1), ElementsAre(40, 50, 60));
  EXPECT_THAT(pixel(image, 2, 1), ElementsAre(70, 80, 90));
}

TEST(ReadPng, PaletteAndSixteenBitImagesAreConvertedToEightBitRgb) {
  const auto palette = read_png(png_fixture("palette-2x2.png"));
  ASSERT_EQ(palette.width, 2);
  ASSERT_EQ(palette.height, 2);
  EXPECT_THAT(pixel(palette, 0, 0), ElementsAre(0, 0, 0));
  EXPECT_THAT(pixel(palette, 1, 0), ElementsAre(255, 255, 255));
  EXPECT_THAT(pixel(palette, 0, 1), ElementsAre(200, 100, 50));
  EXPECT_THAT(pixel(palette, 1, 1), ElementsAre(1, 2, 3));

  const auto deep = read_png(png_fixture("rgb16-2x1.png"));
  ASSERT_EQ(deep.width, 2);
  EXPECT_THAT(pixel(deep, 0, 0), ElementsAre(255, 255, 255));
  EXPECT_THAT(pixel(deep, 1, 0), ElementsAre(0, 0, 0));
}

TEST(ReadPng, MissingNonPngTruncatedAndCorruptFilesAreNamedInTheError) {
  TempDir dir("read-png");
  EXPECT_THAT(error_of(dir / "absent.png"), StartsWith((dir / "absent.png").string() + ": "));

  std::ofstream(dir / "text.png") << "not an image\n";
  EXPECT_THAT(error_of(dir / "text.png"), StartsWith((dir / "text.png").string() + ": "));

  std::ifstream in(png_fixture("rgba-3x2.png"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 60u);
  std::ofstream(dir / "truncated.png", std::ios::binary) << bytes.substr(0, 50);
  EXPECT_THAT(error_of(dir / "truncated.png"), StartsWith((dir / "truncated.png").string() + ": "));

  std::string corrupt = bytes;
  corrupt[45] = static_cast<char>(corrupt[45] ^ 0x5a);  // inside IDAT: its CRC no longer matches
  std::ofstream(dir / "corrupt.png", std::ios::binary) << corrupt;
  EXPECT_THAT(error_of(dir / "corrupt.png"), StartsWith((dir / "corrupt.png").string() + ": "));
}

}  // namespace
}  // namespace fsdpp::harness
