#include "harness/testing/png_image.h"

#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace fsdpp::harness {
namespace {

uint32_t be32(const uint8_t* p) { return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]; }

// PNG filter type 4 (PNG spec 9.4).
uint8_t paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return static_cast<uint8_t>(a);
  return static_cast<uint8_t>(pb <= pc ? b : c);
}

}  // namespace

RgbImage read_png(const std::filesystem::path& file) {
  auto fail = [&](const std::string& what) { return std::runtime_error(file.string() + ": " + what); };
  std::ifstream in(file, std::ios::binary);
  if (!in) throw fail("cannot open");
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kSignature, 8) != 0) throw fail("not a PNG file");

  RgbImage image;
  int channels = 0;
  std::vector<uint8_t> compressed;
  for (size_t pos = 8; pos + 12 <= bytes.size();) {
    const uint32_t length = be32(&bytes[pos]);
    const std::string type(reinterpret_cast<const char*>(&bytes[pos + 4]), 4);
    if (pos + 12 + length > bytes.size()) throw fail("truncated chunk " + type);
    const uint8_t* data = &bytes[pos + 8];
    if (type == "IHDR") {
      image.width = static_cast<int>(be32(data));
      image.height = static_cast<int>(be32(data + 4));
      const int depth = data[8], color = data[9], interlace = data[12];
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0)
        throw fail("only 8-bit non-interlaced RGB/RGBA is supported (depth " + std::to_string(depth) + ", colour type " +
                   std::to_string(color) + ", interlace " + std::to_string(interlace) + ")");
      channels = color == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      compressed.insert(compressed.end(), data, data + length);
    } else if (type == "IEND") {
      break;
    }
    pos += 12 + length;
  }
  if (channels == 0 || image.width <= 0 || image.height <= 0) throw fail("no IHDR");

  const size_t stride = static_cast<size_t>(image.width) * channels;
  std::vector<uint8_t> raw((stride + 1) * image.height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, compressed.data(), compressed.size()) != Z_OK || raw_size != raw.size())
    throw fail("corrupt image data");

  std::vector<uint8_t> previous(stride, 0), row(stride);
  image.rgb.resize(static_cast<size_t>(image.width) * image.height * 3);
  for (int y = 0; y < image.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* src = &raw[y * (stride + 1) + 1];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? row[i - channels] : 0;
      const int b = previous[i];
      const int c = i >= static_cast<size_t>(channels) ? previous[i - channels] : 0;
      int predictor = 0;
      switch (filter) {
        case 0: predictor = 0; break;
        case 1: predictor = a; break;
        case 2: predictor = b; break;
        case 3: predictor = (a + b) / 2; break;
        case 4: predictor = paeth(a, b, c); break;
        default: throw fail("bad filter type " + std::to_string(filter) + " in row " + std::to_string(y));
      }
      row[i] = static_cast<uint8_t>(src[i] + predictor);
    }
    for (int x = 0; x < image.width; ++x)
      std::memcpy(&image.rgb[(static_cast<size_t>(y) * image.width + x) * 3], &row[static_cast<size_t>(x) * channels], 3);
    previous.swap(row);
  }
  return image;
}

}  // namespace fsdpp::harness
