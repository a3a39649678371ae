// safetensors: round trips (single file and HF-sharded), byte-level agreement with the spec
// (https://huggingface.co/docs/safetensors), one test per corruption the reader must reject,
// and the memory cost of loading a 1.1 GB file (mapped, not copied).
#include "core/io/safetensors.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "harness/testing/temp_dir.h"

namespace fsdpp::io {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// ---- helpers ---------------------------------------------------------------------------------

using harness::TempDir;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

// The header text of a safetensors file (bytes 8 .. 8+N), padding included.
std::string header_of(const fs::path& path) {
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  return bytes.substr(8, n);
}

// Replaces the header of a valid file by `header` (length field updated), keeping its data
// buffer byte for byte: how the corruption tests break exactly one thing.
void replace_header(const fs::path& path, const std::string& header) {
  std::string bytes = read_bytes(path);
  std::string old_header = header_of(path);
  write_bytes(path, le64(header.size()) + header + bytes.substr(8 + old_header.size()));
}

// Edits the header of a valid file: `from` must occur in it once.
void edit_header(const fs::path& path, const std::string& from, const std::string& to) {
  std::string header = header_of(path);
  auto at = header.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << header;
  ASSERT_EQ(header.find(from, at + 1), std::string::npos) << from << " occurs twice in " << header;
  replace_header(path, header.replace(at, from.size(), to));
}

// The message of the std::runtime_error `fn` throws, or "no error".
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

std::string tensor_bytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

// Same dtype, same shape, same bytes (NaN payloads and -0.0 included).
void expect_bitwise_equal(const at::Tensor& actual, const at::Tensor& expected, const std::string& name) {
  EXPECT_EQ(actual.scalar_type(), expected.scalar_type()) << name;
  EXPECT_EQ(actual.sizes().vec(), expected.sizes().vec()) << name;
  EXPECT_TRUE(tensor_bytes(actual) == tensor_bytes(expected)) << name << " differs";
}

// Every dtype LibTorch 1.13 shares with safetensors, 0-d and empty shapes included.
NamedTensors sample_tensors() {
  at::manual_seed(7);
  auto special = at::tensor({0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, 3.4e38f});
  return {
      {"model.embed.weight", at::randn({4, 3})},
      {"layers.0.attn.bf16", at::randn({5}).to(at::kBFloat16)},
      {"layers.0.mlp.f16", at::randn({2, 3, 4}).to(at::kHalf)},
      {"step", at::scalar_tensor(int64_t(1) << 40, at::kLong)},  // 0-d
      {"ids", at::arange(-3, 9, at::kLong).reshape({3, 4}) * (int64_t(1) << 50)},
      {"scalar.f32", at::scalar_tensor(3.25, at::kFloat)},  // 0-d
      {"empty.f32", at::empty({0})},
      {"empty.bf16", at::empty({2, 0, 3}, at::kBFloat16)},
      {"special.f32", special},
      {"f64", at::randn({3}, at::kDouble)},
      {"i32", at::arange(-5, 5, at::kInt)},
      {"i16", at::arange(-4, 4, at::kShort)},
      {"i8", at::arange(-3, 3, at::kChar)},
      {"u8", at::arange(250, 256, at::kLong).to(at::kByte)},
      {"mask", at::tensor({1, 0, 1}, at::kByte).to(at::kBool)},
  };
}

// ---- round trips ------------------------------------------------------------------------------

TEST(SafetensorsRoundTrip, EveryDtypeAndShapeComesBackBitwiseIdenticalInOrder) {
  TempDir dir;
  auto tensors = sample_tensors();
  write_safetensors(dir / "all.safetensors", tensors);

  auto file = SafetensorsFile::open(dir / "all.safetensors");
  std::vector<std::string> expected_names;
  for (const auto& [name, t] : tensors) expected_names.push_back(name);
  EXPECT_EQ(file.names(), expected_names);
  for (const auto& [name, t] : tensors) {
    expect_bitwise_equal(file.tensor(name), t, name);
    expect_bitwise_equal(file.copy_tensor(name), t, name + " (copy)");
    EXPECT_EQ(file.info(name).shape, t.sizes().vec()) << name;
  }
  EXPECT_EQ(file.info("layers.0.attn.bf16").dtype, "BF16");
  EXPECT_EQ(file.info("step").dtype, "I64");
  EXPECT_EQ(file.info("step").shape, std::vector<int64_t>{});  // 0-d stays 0-d
  EXPECT_EQ(file.tensor("scalar.f32").dim(), 0);
  EXPECT_EQ(file.info("mask").dtype, "BOOL");
  EXPECT_TRUE(file.metadata().empty());
}

TEST(SafetensorsRoundTrip, NonContiguousTensorsAreStoredAsTheirRowMajorValues) {
  TempDir dir;
  at::Tensor base = at::arange(24, at::kFloat).reshape({4, 6});
  NamedTensors tensors = {
      {"transposed", base.t()}, {"strided", base.slice(1, 1, 6, 2)}, {"expanded", at::ones({1, 3}).expand({2, 3})}};
  write_safetensors(dir / "views.safetensors", tensors);

  auto file = SafetensorsFile::open(dir / "views.safetensors");
  for (const auto& [name, t] : tensors) expect_bitwise_equal(file.tensor(name), t.contiguous(), name);
}

TEST(SafetensorsRoundTrip, MetadataComesBackAndIsOmittedWhenEmpty) {
  TempDir dir;
  write_safetensors(dir / "meta.safetensors", {{"x", at::ones({2})}}, {{"format", "pt"}, {"step", "1200"}});
  write_safetensors(dir / "plain.safetensors", {{"x", at::ones({2})}});

  EXPECT_EQ(SafetensorsFile::open(dir / "meta.safetensors").metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"step", "1200"}}));
  EXPECT_THAT(header_of(dir / "plain.safetensors"), ::testing::Not(HasSubstr("__metadata__")));
}

// ---- byte-level format -------------------------------------------------------------------------

// Bytes computed by hand from the spec, no code of ours involved: length field, header,
// padding and data. Python's safetensors is not installable here; these are the bytes its
// serializer emits for the same input (keys "__metadata__" first, then dtype/shape/
// data_offsets; tensors sorted by alignment then name, which is already the order below).
TEST(SafetensorsFormat, WriterEmitsTheSpecsBytesExactly) {
  TempDir dir;
  // {"a": float32 [1.0, -2.0]}. Header is 54 bytes, padded with 2 spaces to 56 = 0x38.
  write_safetensors(dir / "a.safetensors", {{"a", at::tensor({1.0f, -2.0f})}});
  const std::string expected_a = std::string("\x38\0\0\0\0\0\0\0", 8) +
                                 R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" + "  " +
                                 std::string(
                                     "\x00\x00\x80\x3f"
                                     "\x00\x00\x00\xc0",
                                     8);  // 1.0f, -2.0f LE
  EXPECT_EQ(read_bytes(dir / "a.safetensors"), expected_a);

  // {"n": int64 258 (0-d), "w": bfloat16 [1.0, -0.5]} with metadata {"format": "pt"}.
  // Header is 139 bytes, padded with 5 spaces to 144 = 0x90.
  write_safetensors(dir / "b.safetensors",
                    {{"n", at::scalar_tensor(258, at::kLong)}, {"w", at::tensor({1.0f, -0.5f}).to(at::kBFloat16)}},
                    {{"format", "pt"}});
  const std::string expected_b =
      std::string("\x90\0\0\0\0\0\0\0", 8) +
      R"({"__metadata__":{"format":"pt"},"n":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("w":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})" +
      "     " + std::string("\x02\x01\0\0\0\0\0\0", 8) +  // 258 = 0x0102 LE
      std::string("\x80\x3f\x00\xbf", 4);                 // bf16 1.0 = 0x3F80, -0.5 = 0xBF00, LE
  EXPECT_EQ(read_bytes(dir / "b.safetensors"), expected_b);
}

// A file as another writer may produce it: unpadded header, entries not in offset order, an
// empty tensor sharing an offset with its neighbour, no metadata.
TEST(SafetensorsFormat, ReaderAcceptsAHandBuiltSpecFile) {
  TempDir dir;
  const std::string header =
      R"({"b":{"dtype":"I32","shape":[1],"data_offsets":[2,6]},"e":{"dtype":"F16","shape":[0,4],"data_offsets":[2,2]},)"
      R"("a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})";
  write_bytes(dir / "hand.safetensors", le64(header.size()) + header +
                                            std::string("\x00\x3c"
                                                        "\xff\xff\xff\xff",
                                                        6));  // f16 1.0, i32 -1

  auto file = SafetensorsFile::open(dir / "hand.safetensors");
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "e", "b"}));  // offset order
  EXPECT_EQ(file.tensor("a").item<float>(), 1.0f);
  EXPECT_EQ(file.tensor("b").item<int32_t>(), -1);  // misaligned (offset 2): returned as a copy
  EXPECT_EQ(file.tensor("e").sizes().vec(), (std::vector<int64_t>{0, 4}));
}

TEST(SafetensorsFormat, HeaderIsSpacePaddedToAMultipleOf8SoDataStartsAligned) {
  TempDir dir;
  for (int name_length = 1; name_length <= 9; ++name_length) {
    auto path = dir / "pad.safetensors";
    write_safetensors(path, {{std::string(name_length, 'x'), at::ones({3})}});
    std::string header = header_of(path);
    EXPECT_EQ(header.size() % 8, 0u) << "name length " << name_length;
    auto json_end = header.rfind('}') + 1;
    EXPECT_LT(header.size() - json_end, 8u);
    EXPECT_EQ(header.substr(json_end), std::string(header.size() - json_end, ' '));
    EXPECT_EQ(read_bytes(path).size(), 8 + header.size() + 12);
  }
}

// ---- zero-copy views ----------------------------------------------------------------------------

TEST(SafetensorsView, ViewsPointIntoTheMappingAndOutliveTheFileObject) {
  TempDir dir;
  write_safetensors(dir / "v.safetensors", {{"w", at::arange(1000, at::kFloat)}});
  at::Tensor view;
  {
    auto file = SafetensorsFile::open(dir / "v.safetensors");
    view = file.tensor("w");
    EXPECT_EQ(file.tensor("w").data_ptr(), view.data_ptr());          // same bytes, no copy
    EXPECT_NE(file.copy_tensor("w").data_ptr(), view.data_ptr());     // a copy is separate
    EXPECT_EQ(reinterpret_cast<uintptr_t>(view.data_ptr()) % 4, 0u);  // aligned float view
  }
  // The file object is gone; the view still holds the mapping.
  EXPECT_EQ(view.sum().item<float>(), 999.0f * 1000.0f / 2.0f);
}

TEST(SafetensorsView, InPlaceWritesToAViewNeverReachTheFile) {
  TempDir dir;
  auto path = dir / "cow.safetensors";
  write_safetensors(path, {{"w", at::zeros({64})}});
  const std::string before = read_bytes(path);

  auto view = SafetensorsFile::open(path).tensor("w");
  view.add_(1.0f);
  EXPECT_EQ(view.sum().item<float>(), 64.0f);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(SafetensorsFile::open(path).tensor("w").sum().item<float>(), 0.0f);
}

TEST(SafetensorsView, MisalignedTensorComesBackAsAnAlignedCopyWithTheSameValues) {
  TempDir dir;
  // 3 bytes of u8 first put the float tensor at data offset 3 (HF would sort it first).
  NamedTensors tensors = {{"bytes", at::ones({3}, at::kByte)}, {"f", at::tensor({1.5f, -2.5f})}};
  write_safetensors(dir / "m.safetensors", tensors);

  auto file = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_EQ(file.info("f").begin, 3u);
  at::Tensor f = file.tensor("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data_ptr()) % 4, 0u);
  expect_bitwise_equal(f, tensors[1].second, "f");
}

// ---- writer errors ------------------------------------------------------------------------------

TEST(SafetensorsWrite, DuplicateTensorNamesAreRejectedNamingTheFileAndName) {
  TempDir dir;
  auto path = dir / "dup.safetensors";
  auto message = error_of([&] { write_safetensors(path, {{"w", at::ones({1})}, {"w", at::ones({1})}}); });
  EXPECT_THAT(message, AllOf(HasSubstr(path.string()), HasSubstr("duplicate tensor name 'w'")));
  EXPECT_FALSE(fs::exists(path));
}

TEST(SafetensorsWrite, ReservedMetadataNameIsRejected) {
  TempDir dir;
  auto path = dir / "r.safetensors";
  auto message = error_of([&] { write_safetensors(path, {{"__metadata__", at::ones({1})}}); });
  EXPECT_THAT(message, AllOf(HasSubstr(path.string()), HasSubstr("reserved")));
}

TEST(SafetensorsWrite, DtypeWithoutASafetensorsNameIsRejected) {
  TempDir dir;
  auto path = dir / "c.safetensors";
  auto message = error_of([&] { write_safetensors(path, {{"z", at::ones({2}, at::kComplexFloat)}}); });
  EXPECT_THAT(message, AllOf(HasSubstr(path.string()), HasSubstr("'z'"), HasSubstr("ComplexFloat")));
  EXPECT_FALSE(fs::exists(path));
}

TEST(SafetensorsWrite, MissingFolderIsAnErrorNamingIt) {
  TempDir dir;
  auto path = dir / "no" / "such" / "x.safetensors";
  EXPECT_THAT(error_of([&] {
                write_safetensors(path, {{"w", at::ones({1})}});
              }),
              AllOf(HasSubstr(path.string()), HasSubstr("does not exist")));
}

TEST(SafetensorsWrite, OverwriteIsAtomicAndLeavesNoTemporaryFile) {
  TempDir dir;
  write_safetensors(dir / "x.safetensors", {{"w", at::zeros({4})}});
  // A second name for the old file: a reader holding it open sees the same inode. An atomic
  // overwrite (a new file renamed over the name) leaves that inode's bytes as they were;
  // rewriting the file in place would change them.
  const std::string old_bytes = read_bytes(dir / "x.safetensors");
  fs::create_hard_link(dir / "x.safetensors", dir / "old-link");
  write_safetensors(dir / "x.safetensors", {{"w", at::ones({8})}});
  EXPECT_EQ(read_bytes(dir / "old-link"), old_bytes);
  fs::remove(dir / "old-link");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) files.push_back(entry.path().filename().string());
  EXPECT_EQ(files, std::vector<std::string>{"x.safetensors"});
  EXPECT_EQ(SafetensorsFile::open(dir / "x.safetensors").tensor("w").sum().item<float>(), 8.0f);
}

// ---- reader errors: one corruption each --------------------------------------------------------

// A valid two-tensor file: "a" F32 [2] at [0,8), "b" F32 [2] at [8,16).
fs::path write_valid_pair(const TempDir& dir) {
  auto path = dir / "pair.safetensors";
  write_safetensors(path, {{"a", at::tensor({1.0f, 2.0f})}, {"b", at::tensor({3.0f, 4.0f})}});
  return path;
}

std::string open_error(const fs::path& path) {
  return error_of([&] { SafetensorsFile::open(path); });
}

TEST(SafetensorsCorrupt, FileShorterThanTheLengthFieldIsRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  write_bytes(path, read_bytes(path).substr(0, 5));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path.string()), HasSubstr("5 bytes, shorter than the 8-byte header length")));
}

TEST(SafetensorsCorrupt, HeaderLengthLargerThanTheFileIsRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  std::string bytes = read_bytes(path);
  write_bytes(path, le64(bytes.size()) + bytes.substr(8));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path.string()), HasSubstr("header length " + std::to_string(bytes.size())),
                    HasSubstr("is larger than the")));
}

TEST(SafetensorsCorrupt, HeaderThatIsNotJsonIsRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  edit_header(path, R"("shape":[2],"data_offsets":[0,8])", R"("shape":[2],"data_offsets":[0,8)");
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path.string()), HasSubstr("header is not valid JSON"), HasSubstr("column")));
}

TEST(SafetensorsCorrupt, HeaderThatDoesNotStartWithABraceIsRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  replace_header(path, " " + header_of(path));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path.string()), HasSubstr("does not start with '{'")));
}

TEST(SafetensorsCorrupt, UnknownDtypeIsRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  edit_header(path, R"("b":{"dtype":"F32")", R"("b":{"dtype":"Q32")");
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path.string()), HasSubstr("tensor 'b'"), HasSubstr("unknown dtype 'Q32'")));
}

TEST(SafetensorsCorrupt, OffsetsBeyondTheEndOfTheDataAreRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  edit_header(path, R"("shape":[2],"data_offsets":[8,16])", R"("shape":[4],"data_offsets":[8,24])");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path.string()), HasSubstr("tensor 'b'"),
                                      HasSubstr("go beyond the end of the data buffer (16 bytes)")));
}

TEST(SafetensorsCorrupt, OffsetsThatDisagreeWithShapeTimesDtypeSizeAreRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  edit_header(path, R"("shape":[2],"data_offsets":[0,8])", R"("shape":[3],"data_offsets":[0,8])");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path.string()), HasSubstr("tensor 'a'"),
                                      HasSubstr("hold 8 bytes but shape [3] of F32 needs 12 bytes")));
}

TEST(SafetensorsCorrupt, HoleBetweenTensorsIsRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  edit_header(path, R"("shape":[2],"data_offsets":[0,8])", R"("shape":[1],"data_offsets":[0,4])");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path.string()), HasSubstr("hole in the data buffer: bytes [4, 8)"),
                                      HasSubstr("before tensor 'b'")));
}

TEST(SafetensorsCorrupt, BytesAfterTheLastTensorAreRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  write_bytes(path, read_bytes(path) + "junk");
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path.string()), HasSubstr("hole in the data buffer: bytes [16, 20) at the end")));
}

TEST(SafetensorsCorrupt, OverlappingTensorsAreRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  edit_header(path, R"("data_offsets":[8,16])", R"("data_offsets":[4,12])");
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path.string()), HasSubstr("tensor 'b'"), HasSubstr("overlaps tensor 'a'")));
}

TEST(SafetensorsCorrupt, DuplicateTensorNamesAreRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  edit_header(path, R"("b":{)", R"("a":{)");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path.string()), HasSubstr("duplicate key 'a'")));
}

TEST(SafetensorsCorrupt, MetadataValueThatIsNotAStringIsRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  edit_header(path, R"({"a":)", R"({"__metadata__":{"step":12},"a":)");
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path.string()), HasSubstr("__metadata__ value of 'step' is 12, not a string")));
}

TEST(SafetensorsCorrupt, UnknownFieldInATensorEntryIsRejected) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  edit_header(path, R"("a":{"dtype")", R"("a":{"order":"F","dtype")");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path.string()), HasSubstr("tensor 'a': unknown field 'order'")));
}

TEST(SafetensorsCorrupt, MissingTensorRequestedByNameIsAnErrorNamingTensorAndFile) {
  TempDir dir;
  auto path = write_valid_pair(dir);
  auto file = SafetensorsFile::open(path);
  EXPECT_FALSE(file.contains("c"));
  EXPECT_THAT(error_of([&] { file.tensor("c"); }), AllOf(HasSubstr(path.string()), HasSubstr("no tensor named 'c'")));
  EXPECT_THAT(error_of([&] { file.info("c"); }), AllOf(HasSubstr(path.string()), HasSubstr("no tensor named 'c'")));
}

TEST(SafetensorsCorrupt, MissingFileIsAnErrorNamingIt) {
  TempDir dir;
  EXPECT_THAT(open_error(dir / "absent.safetensors"),
              AllOf(HasSubstr((dir / "absent.safetensors").string()), HasSubstr("cannot open")));
}

// ---- sharded checkpoints ------------------------------------------------------------------------

std::vector<std::string> names_in(const fs::path& shard) { return SafetensorsFile::open(shard).names(); }

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_bytes(path)); }

TEST(SafetensorsSharded, RoundTripAcrossShardsIsBitwiseIdentical) {
  TempDir dir;
  auto tensors = sample_tensors();
  auto written = write_sharded_safetensors(dir.path(), tensors, /*max_shard_bytes=*/64);

  ASSERT_GT(written.shard_paths.size(), 2u);
  ASSERT_TRUE(written.index_path.has_value());
  const size_t n = written.shard_paths.size();
  EXPECT_EQ(written.shard_paths.front().filename(), "model-00001-of-0000" + std::to_string(n) + ".safetensors");
  EXPECT_EQ(*written.index_path, dir / "model.safetensors.index.json");
  for (const auto& shard : written.shard_paths) EXPECT_EQ(SafetensorsFile::open(shard).metadata().at("format"), "pt");

  uint64_t total = 0;
  std::vector<std::string> expected_names;
  for (const auto& [name, t] : tensors) {
    total += t.numel() * t.element_size();
    expected_names.push_back(name);
  }
  std::sort(expected_names.begin(), expected_names.end());
  auto index_json = read_json(*written.index_path);
  EXPECT_EQ(index_json["metadata"]["total_size"], total);
  EXPECT_EQ(index_json["weight_map"].size(), tensors.size());

  auto checkpoint = load_checkpoint_dir(dir.path());
  EXPECT_EQ(checkpoint.names(), expected_names);
  EXPECT_EQ(checkpoint.total_size(), total);
  EXPECT_EQ(checkpoint.shard_paths(), written.shard_paths);
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(checkpoint.shard_path(name).filename(), index_json["weight_map"][name].get<std::string>());
    expect_bitwise_equal(checkpoint.tensor(name), t, name);
    expect_bitwise_equal(checkpoint.copy_tensor(name), t, name + " (copy)");
  }
}

TEST(SafetensorsSharded, SplitClosesAShardBeforeItOverflowsAndIsolatesOversizedTensors) {
  TempDir dir;
  // 40 + 40 fit in 100; the third 40 would overflow; 200 is over the limit alone.
  NamedTensors tensors = {{"a", at::zeros({10})},   {"b", at::zeros({10})}, {"c", at::zeros({10})},
                          {"big", at::zeros({50})}, {"d", at::zeros({2})},  {"e", at::zeros({2})}};
  auto written = write_sharded_safetensors(dir.path(), tensors, 100);

  ASSERT_EQ(written.shard_paths.size(), 4u);
  EXPECT_EQ(written.total_size, 4u * (10 + 10 + 10 + 50 + 2 + 2));
  EXPECT_EQ(names_in(dir / "model-00001-of-00004.safetensors"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(names_in(dir / "model-00002-of-00004.safetensors"), (std::vector<std::string>{"c"}));
  EXPECT_EQ(names_in(dir / "model-00003-of-00004.safetensors"), (std::vector<std::string>{"big"}));
  EXPECT_EQ(names_in(dir / "model-00004-of-00004.safetensors"), (std::vector<std::string>{"d", "e"}));
}

TEST(SafetensorsSharded, EverythingInOneShardIsWrittenAsModelSafetensorsWithoutIndex) {
  TempDir dir;
  auto written = write_sharded_safetensors(dir.path(), {{"w", at::ones({4})}}, 1 << 20);
  EXPECT_EQ(written.shard_paths, std::vector<fs::path>{dir / "model.safetensors"});
  EXPECT_FALSE(written.index_path.has_value());
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  auto checkpoint = load_checkpoint_dir(dir.path());
  EXPECT_EQ(checkpoint.path(), dir / "model.safetensors");
  EXPECT_EQ(checkpoint.tensor("w").sum().item<float>(), 4.0f);
}

TEST(SafetensorsSharded, RewritingRemovesFilesOfTheOlderCheckpoint) {
  TempDir dir;
  NamedTensors tensors = {{"a", at::zeros({10})}, {"b", at::zeros({10})}, {"c", at::zeros({10})}};
  write_sharded_safetensors(dir.path(), tensors, 40);  // 3 shards + index
  write_sharded_safetensors(dir.path(), tensors, 80);  // 2 shards + index
  EXPECT_FALSE(fs::exists(dir / "model-00003-of-00003.safetensors"));
  EXPECT_EQ(load_checkpoint_dir(dir.path()).shard_paths().size(), 2u);
  write_sharded_safetensors(dir.path(), tensors, 1000);  // single file
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) files.push_back(entry.path().filename().string());
  EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});
}

// Writes a 3-shard checkpoint of "a", "b", "c" (one per shard).
void write_three_shards(const TempDir& dir) {
  write_sharded_safetensors(dir.path(),
                            {{"a", at::full({4}, 1.0f)}, {"b", at::full({4}, 2.0f)}, {"c", at::full({4}, 3.0f)}}, 16);
}

TEST(SafetensorsSharded, IndexPointingToAMissingShardIsAnErrorNamingIndexAndShard) {
  TempDir dir;
  write_three_shards(dir);
  fs::remove(dir / "model-00002-of-00003.safetensors");
  auto message = error_of([&] { load_checkpoint_dir(dir.path()); });
  EXPECT_THAT(message, AllOf(HasSubstr((dir / "model.safetensors.index.json").string()),
                             HasSubstr("shard 'model-00002-of-00003.safetensors' (holding tensor 'b') is missing")));
}

TEST(SafetensorsSharded, ShardsAreOpenedOnlyWhenOneOfTheirTensorsIsRead) {
  TempDir dir;
  write_three_shards(dir);
  auto shard3 = dir / "model-00003-of-00003.safetensors";
  write_bytes(shard3, read_bytes(shard3) + "junk");  // invalid, but only when opened

  auto checkpoint = load_checkpoint_dir(dir.path());
  EXPECT_EQ(checkpoint.tensor("a").sum().item<float>(), 4.0f);
  EXPECT_EQ(checkpoint.tensor("b").sum().item<float>(), 8.0f);
  EXPECT_THAT(error_of([&] { checkpoint.tensor("c"); }),
              AllOf(HasSubstr(shard3.string()), HasSubstr("hole in the data buffer")));
}

TEST(SafetensorsSharded, MissingTensorRequestedByNameIsAnErrorNamingTensorAndIndex) {
  TempDir dir;
  write_three_shards(dir);
  auto checkpoint = load_checkpoint_dir(dir.path());
  EXPECT_THAT(
      error_of([&] { checkpoint.tensor("lm_head.weight"); }),
      AllOf(HasSubstr((dir / "model.safetensors.index.json").string()), HasSubstr("no tensor named 'lm_head.weight'")));
}

TEST(SafetensorsSharded, IndexPromisingATensorItsShardLacksIsAnError) {
  TempDir dir;
  write_three_shards(dir);
  auto index_path = dir / "model.safetensors.index.json";
  auto index = read_json(index_path);
  index["weight_map"]["ghost"] = "model-00001-of-00003.safetensors";
  write_bytes(index_path, index.dump(2));

  auto checkpoint = SafetensorsIndex::open(dir.path());
  EXPECT_THAT(
      error_of([&] { checkpoint.tensor("a"); }),
      AllOf(HasSubstr(index_path.string()),
            HasSubstr("maps tensor 'ghost' to shard 'model-00001-of-00003.safetensors', which does not contain it")));
}

TEST(SafetensorsSharded, IndexWithoutWeightMapOrWithAPathForAShardIsRejected) {
  TempDir dir;
  auto index_path = dir / "model.safetensors.index.json";
  write_bytes(index_path, R"({"metadata": {"total_size": 0}})");
  EXPECT_THAT(error_of([&] { SafetensorsIndex::open(index_path); }),
              AllOf(HasSubstr(index_path.string()), HasSubstr("missing object 'weight_map'")));
  write_bytes(index_path, R"({"weight_map": {"w": "../elsewhere.safetensors"}})");
  EXPECT_THAT(error_of([&] { SafetensorsIndex::open(index_path); }),
              AllOf(HasSubstr(index_path.string()), HasSubstr("'../elsewhere.safetensors', not a file name")));
  write_bytes(index_path, R"({"weight_map": {"w": "x.safetensors",)");
  EXPECT_THAT(error_of([&] { SafetensorsIndex::open(index_path); }),
              AllOf(HasSubstr(index_path.string()), HasSubstr("not valid JSON")));
}

TEST(SafetensorsSharded, FolderWithNeitherOrBothLayoutsIsRejected) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { load_checkpoint_dir(dir.path()); }),
              AllOf(HasSubstr(dir.path().string()),
                    HasSubstr("holds neither model.safetensors nor model.safetensors.index.json")));
  write_three_shards(dir);
  write_safetensors(dir / "model.safetensors", {{"a", at::ones({1})}});
  EXPECT_THAT(error_of([&] { load_checkpoint_dir(dir.path()); }),
              AllOf(HasSubstr(dir.path().string()), HasSubstr("holds both")));
  EXPECT_THAT(error_of([&] { load_checkpoint_dir(dir / "nope"); }), HasSubstr("not a folder"));
}

// ---- memory ---------------------------------------------------------------------------------------

// Fields of /proc/self/status in bytes ("VmRSS", "VmHWM", "RssAnon", "RssFile").
uint64_t proc_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  return 0;
}

// Loading a 1.1 GB file costs its pages once (they are file-backed and count in RSS when
// touched), never a second, anonymous copy. Reading every tensor through views, the
// process's peak RSS may grow by about 1x the file; a copying loader would reach 2x.
TEST(SafetensorsMemory, LoadingA1100MBFileMapsItInsteadOfCopyingIt) {
  TempDir dir;
  const auto space = fs::space(dir.path());
  if (space.available < (uint64_t(3) << 30)) {
    FAIL() << "need 3 GiB free in " << dir.path() << " for the 1.1 GB memory test, have " << space.available / (1 << 20)
           << " MiB";
  }

  // 11 tensors x 25M floats = 1.1e9 bytes of data. Each is a stride-0 expansion of one
  // value, so only the writer's one-tensor-at-a-time contiguous copy (100 MB) is ever live.
  constexpr int kTensors = 11;
  constexpr int64_t kFloatsPerTensor = 25'000'000;
  NamedTensors tensors;
  for (int i = 0; i < kTensors; ++i)
    tensors.emplace_back("layer." + std::to_string(i), at::full({1}, 0.5f * (i + 1)).expand({kFloatsPerTensor}));
  const auto path = dir / "big.safetensors";
  const auto t0 = std::chrono::steady_clock::now();
  write_safetensors(path, tensors);
  tensors.clear();
  const auto t1 = std::chrono::steady_clock::now();
  const uint64_t file_bytes = fs::file_size(path);
  ASSERT_GT(file_bytes, uint64_t(1'100'000'000));

  // Reset the peak ("5" to clear_refs, Linux >= 4.0) and also sample VmRSS, in case the
  // reset is not allowed here; the larger of the two peaks is reported.
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  const uint64_t rss_before = proc_status_bytes("VmRSS");
  const uint64_t anon_before = proc_status_bytes("RssAnon");
  std::atomic<bool> sampling{true};
  std::atomic<uint64_t> sampled_peak{rss_before};
  uint64_t anon_peak = anon_before;
  std::thread sampler([&] {
    while (sampling.load()) {
      sampled_peak = std::max<uint64_t>(sampled_peak.load(), proc_status_bytes("VmRSS"));
      anon_peak = std::max(anon_peak, proc_status_bytes("RssAnon"));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });

  double total = 0;
  {
    auto file = SafetensorsFile::open(path);
    for (const auto& name : file.names()) total += file.tensor(name).sum().item<double>();
  }
  sampling = false;
  sampler.join();
  const auto t2 = std::chrono::steady_clock::now();
  const uint64_t peak = std::max<uint64_t>(sampled_peak.load(), proc_status_bytes("VmHWM"));
  const uint64_t growth = peak > rss_before ? peak - rss_before : 0;
  const uint64_t anon_growth = anon_peak > anon_before ? anon_peak - anon_before : 0;

  double expected_total = 0;
  for (int i = 0; i < kTensors; ++i) expected_total += 0.5 * (i + 1) * kFloatsPerTensor;
  EXPECT_NEAR(total, expected_total, expected_total * 1e-4);

  const double ratio = double(growth) / double(file_bytes);
  const double anon_ratio = double(anon_growth) / double(file_bytes);
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  std::printf(
      "[memory] file %.1f MB: peak RSS growth %.1f MB (%.2fx file), anonymous growth %.1f MB (%.3fx); "
      "write %.1f s, open+sum %.1f s\n",
      file_bytes / 1e6, growth / 1e6, ratio, anon_growth / 1e6, anon_ratio, secs(t1 - t0), secs(t2 - t1));
  RecordProperty("file_bytes", std::to_string(file_bytes));
  RecordProperty("peak_rss_growth_bytes", std::to_string(growth));
  RecordProperty("peak_anon_rss_growth_bytes", std::to_string(anon_growth));
  EXPECT_LT(ratio, 1.25) << "peak RSS grew by " << growth << " bytes loading a " << file_bytes << "-byte file";
  EXPECT_LT(anon_ratio, 0.05) << "anonymous memory grew by " << anon_growth << " bytes: something copied the data";
}

}  // namespace
}  // namespace fsdpp::io
