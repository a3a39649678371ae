// A PNG reader for tests that inspect screenshots (headless Chromium's), over libpng's
// simplified API: any PNG libpng reads (RGB, RGBA, grey, palette, 16-bit, interlaced)
// comes back as 8-bit RGB.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace fsdpp::harness {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel (alpha dropped, not composited)
  const uint8_t* at(int x, int y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

// Throws std::runtime_error "<file>: <what>" when the file cannot be opened, is not a PNG,
// or is truncated or corrupt (libpng's message, chunk CRCs included).
RgbImage read_png(const std::filesystem::path& file);

}  // namespace fsdpp::harness
