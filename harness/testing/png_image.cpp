#include "harness/testing/png_image.h"

#include <png.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace fsdpp::harness {

RgbImage read_png(const std::filesystem::path& file) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  // png_image_free releases what begin_read allocated, on every path (a no-op when none).
  auto fail = [&](const std::string& what) {
    png_image_free(&png);
    return std::runtime_error(file.string() + ": " + what);
  };
  if (!png_image_begin_read_from_file(&png, file.c_str())) throw fail(png.message);

  // RGBA, then the alpha byte dropped: PNG_FORMAT_RGB would composite onto a background,
  // and the tests compare the colours the page drew.
  png.format = PNG_FORMAT_RGBA;
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, /*background=*/nullptr, rgba.data(), /*row_stride=*/0, /*colormap=*/nullptr))
    throw fail(png.message);

  RgbImage image;
  image.width = static_cast<int>(png.width);
  image.height = static_cast<int>(png.height);
  const size_t pixels = static_cast<size_t>(png.width) * png.height;
  image.rgb.resize(pixels * 3);
  for (size_t i = 0; i < pixels; ++i) std::memcpy(&image.rgb[i * 3], &rgba[i * 4], 3);
  png_image_free(&png);
  return image;
}

}  // namespace fsdpp::harness
