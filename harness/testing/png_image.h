// A minimal PNG reader for tests that inspect screenshots: 8-bit RGB or RGBA,
// non-interlaced (what headless Chromium writes), decoded with zlib.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace fsdpp::harness {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel (alpha dropped)
  const uint8_t* at(int x, int y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

// Throws std::runtime_error naming `file` for other kinds of PNG (palette, 16-bit,
// interlaced) and for truncated or corrupt data (chunk CRCs are not checked).
RgbImage read_png(const std::filesystem::path& file);

}  // namespace fsdpp::harness
