#include "core/plan/plan_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>

#include "core/fsdp/sharding.h"

namespace fsdpp::plan {

namespace {

std::string ascii_lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A number and the rest of the text after it ("80GB" -> 80, "gb"). Throws naming flag.
std::pair<double, std::string> number_and_unit(const std::string& text, const std::string& flag,
                                               const std::string& expected) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument(flag + " '" + text + "': expected " + expected);
  }
  std::string unit = ascii_lower(text.substr(used));
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  if (!std::isfinite(value) || value <= 0)
    throw std::invalid_argument(flag + " '" + text + "': expected a positive amount, " + expected);
  return {value, unit};
}

}  // namespace

namespace {

// The known kinds by their (lower-case) names. Datasheet memory and HBM bandwidth (NVIDIA
// H100 SXM5, H200 SXM, A100 SXM4 80GB). The matmul rate is what the benchmark measured on
// an H100 (results/gpu/: the median n=8192 bf16 matmul, 7.5e14 FLOP/s, 76% of the 989
// TFLOP/s datasheet); H200 has the same GH100 compute; A100's 312 TFLOP/s datasheet figure
// is scaled by the same 76%.
std::optional<DeviceSpec> known_device(const std::string& name) {
  if (name == "h100") return DeviceSpec{"h100", 80LL * 1000 * 1000 * 1000, 7.5e14, 3.35e12};
  if (name == "h200") return DeviceSpec{"h200", 141LL * 1000 * 1000 * 1000, 7.5e14, 4.8e12};
  if (name == "a100-80g") return DeviceSpec{"a100-80g", 80LL * 1000 * 1000 * 1000, 312e12 * 0.76, 2.039e12};
  return std::nullopt;
}

// The scale of a size or rate unit, already lower-case: "" and "b" are 1, the decimal
// prefixes kb..tb, and with `binary` also kib..tib. nullopt for any other unit.
std::optional<double> unit_scale(const std::string& unit, bool binary) {
  static const std::map<std::string, double> kDecimal = {{"", 1.0},   {"b", 1.0},  {"kb", 1e3},
                                                         {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}};
  static const std::map<std::string, double> kBinary = {
      {"kib", 1024.0}, {"mib", 1024.0 * 1024}, {"gib", 1024.0 * 1024 * 1024}, {"tib", 1024.0 * 1024 * 1024 * 1024}};
  if (auto it = kDecimal.find(unit); it != kDecimal.end()) return it->second;
  if (auto it = kBinary.find(unit); binary && it != kBinary.end()) return it->second;
  return std::nullopt;
}

}  // namespace

DeviceSpec device_spec(const std::string& kind) {
  if (auto device = known_device(ascii_lower(kind))) return *device;
  throw std::invalid_argument("--gpu-memory '" + kind +
                              "': expected a size in bytes (e.g. 80GB, 24GiB) or h100, h200, a100-80g");
}

DeviceSpec gpu_memory_device(const std::string& text) {
  if (auto device = known_device(text)) return *device;
  DeviceSpec custom = *known_device("h100");
  custom.name = "custom (H100 rates)";
  custom.memory_bytes = parse_bytes(text, "--gpu-memory");
  return custom;
}

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  const std::string expected = "a size such as 80GB, 24GiB, 512MiB or a number of bytes";
  auto [value, unit] = number_and_unit(text, flag, expected);
  const auto scale = unit_scale(unit, /*binary=*/true);
  if (!scale) throw std::invalid_argument(flag + " '" + text + "': unknown unit '" + unit + "', expected " + expected);
  const double bytes = value * *scale;
  if (bytes < 1 || bytes > 9.0e18) throw std::invalid_argument(flag + " '" + text + "': expected " + expected);
  return static_cast<int64_t>(std::llround(bytes));
}

double parse_bandwidth(const std::string& text, const std::string& flag) {
  const std::string expected = "a rate such as 450GB/s, 400Gb/s (bits) or a number of bytes per second";
  auto [value, unit] = number_and_unit(text, flag, expected);
  // Case matters for bits (Gb) against bytes (GB): read it from the original text.
  const std::string raw = text.substr(text.size() - unit.size());
  const bool bits = raw.find('b') != std::string::npos && raw.find('B') == std::string::npos;
  std::string u = unit;
  if (u.size() >= 2 && (u.substr(u.size() - 2) == "/s" || u.substr(u.size() - 2) == "ps")) u.resize(u.size() - 2);
  const auto scale = unit_scale(u, /*binary=*/false);
  if (!scale) throw std::invalid_argument(flag + " '" + text + "': unknown unit, expected " + expected);
  return value * *scale / (bits ? 8.0 : 1.0);
}

int PlanConfig::shard_group_size() const {
  // On several nodes a hybrid strategy shards within a node unless told otherwise, as
  // `fsdpp train` does.
  const bool within_node = hybrid_shard_size == 0 && nodes > 1;
  return fsdp::shard_group_size(strategy, world_size(), within_node ? nproc : hybrid_shard_size);
}

}  // namespace fsdpp::plan
