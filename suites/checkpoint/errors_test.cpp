// Every way a checkpoint can be wrong fails with one line that names the file and says
// what was expected.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <functional>
#include <vector>

#include "core/checkpoint/checkpoint_reader.h"
#include "core/checkpoint/checkpoint_scan.h"
#include "core/checkpoint/checkpoint_writer.h"
#include "core/checkpoint/fsdp_state.h"
#include "core/checkpoint/hf_export.h"
#include "core/checkpoint/sha256.h"
#include "harness/testing/multirank.h"
#include "harness/testing/temp_dir.h"
#include "suites/checkpoint/checkpoint_fixtures.h"

namespace fsdpp::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// A checkpoint of two ranks: w [6, 4] (rows 0-2 in rank 0's file, 3-5 in rank 1's), b [5].
class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    write_checkpoint(dir, testing::split_like_fsdp({{"w", torch::randn({6, 4})}, {"b", torch::randn({5})}}, 2), {});
  }
  // Edits index.json as a writer would have written it: index_sha256 (CHECKPOINT.md) is
  // computed again, so that the reader's other checks are the ones tested.
  void edit_index(const std::function<void(nlohmann::json&)>& edit) {
    auto index = nlohmann::json::parse(testing::read_text(dir / "index.json"));
    edit(index);
    if (index.contains("index_sha256")) {
      index.erase("index_sha256");
      index["index_sha256"] = sha256_hex(index.dump());
    }
    testing::write_text(dir / "index.json", index.dump());
  }

  harness::TempDir tmp{"ckpt-errors"};
  fs::path dir = tmp / "step-000001";
  fs::path rank1 = dir / "rank-00001.safetensors";
};

TEST_F(BrokenCheckpoint, AFlippedByteFailsTheChecksumOfThatFileOnly) {
  const std::string expected_sha = load_checkpoint(dir).index().files.at("rank-00001.safetensors").sha256;
  std::string bytes = testing::read_text(rank1);
  bytes[bytes.size() - 3] ^= 0x40;
  testing::write_text(rank1, bytes);
  auto reader = load_checkpoint(dir);  // sizes match: opening succeeds
  auto rows = torch::empty({3, 4});
  EXPECT_EQ(error_of([&] { reader.read_rows("w", 0, rows); }), "");  // rank 0's rows: its file is fine
  const std::string message = "checkpoint file " + rank1.string() + ": sha256 is " + sha256_hex(bytes) +
                              ", index.json says " + expected_sha + " (file corrupt)";
  EXPECT_EQ(error_of([&] { reader.read_rows("w", 3, rows); }), message);
  EXPECT_EQ(error_of([&] { load_checkpoint(dir).verify_all(); }), message);
}

TEST_F(BrokenCheckpoint, ATruncatedFileIsRejectedWhenOpening) {
  const auto size = fs::file_size(rank1);
  fs::resize_file(rank1, size - 10);
  EXPECT_EQ(error_of([&] { load_checkpoint(dir); }), "checkpoint file " + rank1.string() + ": " +
                                                         std::to_string(size - 10) + " bytes, index.json says " +
                                                         std::to_string(size) + " (truncated or rewritten)");
}

TEST_F(BrokenCheckpoint, AMissingFileIsRejectedWhenOpening) {
  fs::remove(rank1);
  EXPECT_EQ(error_of([&] { load_checkpoint(dir); }),
            "checkpoint file " + rank1.string() + ": missing (index.json lists it)");
}

TEST_F(BrokenCheckpoint, AMissingIndexIsNotACheckpoint) {
  fs::remove(dir / "index.json");
  EXPECT_EQ(error_of([&] { load_checkpoint(dir); }), "checkpoint index " + (dir / "index.json").string() + ": missing");
}

TEST_F(BrokenCheckpoint, AnIndexOfAnotherFormatIsRejected) {
  edit_index([](nlohmann::json& j) { j["format"] = "torch.distributed.checkpoint"; });
  EXPECT_EQ(error_of([&] { load_checkpoint(dir); }),
            "checkpoint index " + (dir / "index.json").string() +
                ": format is 'torch.distributed.checkpoint', expected 'fsdpp.checkpoint'");
}

TEST_F(BrokenCheckpoint, AnIndexOfAnotherVersionIsRejected) {
  for (int version : {3, 0}) {
    edit_index([version](nlohmann::json& j) { j["version"] = version; });
    EXPECT_EQ(error_of([&] { load_checkpoint(dir); }), "checkpoint index " + (dir / "index.json").string() +
                                                           ": version is " + std::to_string(version) +
                                                           ", this reader knows versions 1 to 2");
  }
}

TEST_F(BrokenCheckpoint, AnIndexWithAnUnknownFieldIsRejected) {
  edit_index([](nlohmann::json& j) { j["sharding_plan"] = "x"; });
  EXPECT_EQ(error_of([&] { load_checkpoint(dir); }),
            "checkpoint index " + (dir / "index.json").string() +
                ": has unknown field 'sharding_plan' (this reader knows version 2)");
}

// Fault trials (ci/fault_trials.sh, corruption): a byte of index.json changed so that it
// stays valid JSON (here the trainer's step 4 -> 5, as a flipped bit does) was read as if
// saved, and a resumed run went on from the wrong step, data position or AdamW step count.
// Version 2's index_sha256 covers the index's own content.
TEST_F(BrokenCheckpoint, AValueOfIndexJsonChangedIntoAnotherValidValueIsRejectedNamingTheFile) {
  const fs::path step = tmp / "step-000004";
  write_checkpoint(step, testing::split_like_fsdp({{"w", torch::randn({6, 4})}}, 2),
                   {{"step", 4}, {"data_position", 16}});
  const fs::path index = step / "index.json";
  std::string text = testing::read_text(index);
  const auto at = text.find("\"step\": 4");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 8] ^= 0x01;  // '4' -> '5'
  testing::write_text(index, text);
  auto edited = nlohmann::json::parse(text);
  const std::string stated = edited["index_sha256"];
  edited.erase("index_sha256");
  const std::string message = "checkpoint index " + index.string() + ": content sha256 is " +
                              sha256_hex(edited.dump()) + ", index_sha256 says " + stated +
                              " (index.json corrupt or edited)";
  EXPECT_EQ(error_of([&] { load_checkpoint(step); }), message);
  // A resume (--resume auto) skips it, saying why, and takes the older complete one.
  auto latest = find_latest_complete(tmp.path(), /*verify_checksums=*/true);
  ASSERT_TRUE(latest.dir.has_value());
  EXPECT_EQ(*latest.dir, dir);
  ASSERT_EQ(latest.skipped.size(), 1u);
  EXPECT_EQ(latest.skipped[0].reason, message);
}

TEST_F(BrokenCheckpoint, WhitespaceIsNotContent) {
  std::string text = testing::read_text(dir / "index.json");
  testing::write_text(dir / "index.json", "\n  " + text + "\n\n");
  EXPECT_EQ(error_of([&] { load_checkpoint(dir).verify_all(); }), "");
}

TEST_F(BrokenCheckpoint, AVersion1IndexWithoutItsOwnChecksumIsStillRead) {
  auto index = nlohmann::json::parse(testing::read_text(dir / "index.json"));
  index["version"] = 1;
  index.erase("index_sha256");
  testing::write_text(dir / "index.json", index.dump(2));
  auto rows = torch::empty({3, 4});
  EXPECT_EQ(error_of([&] { load_checkpoint(dir).read_rows("w", 3, rows); }), "");
  index["index_sha256"] = std::string(64, '0');  // version 1 has no such field
  testing::write_text(dir / "index.json", index.dump(2));
  EXPECT_EQ(error_of([&] { load_checkpoint(dir); }),
            "checkpoint index " + (dir / "index.json").string() +
                ": has unknown field 'index_sha256' (this reader knows version 1)");
}

TEST_F(BrokenCheckpoint, PiecesThatLeaveRowsUncoveredAreRejected) {
  edit_index([](nlohmann::json& j) { j["tensors"]["w"]["pieces"].erase(1); });
  EXPECT_EQ(error_of([&] { load_checkpoint(dir); }), "checkpoint index " + (dir / "index.json").string() +
                                                         ": tensor 'w' pieces cover rows [0, 3), expected [0, 6)");
}

// A writer bug, not corruption: the checksum matches, the safetensors header does not.
TEST_F(BrokenCheckpoint, AHeaderThatLiesAboutOffsetsFailsWithTheSafetensorsReadersError) {
  std::string bytes = testing::read_text(rank1);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, header_len));
  header["w"]["data_offsets"][1] = header["w"]["data_offsets"][1].get<uint64_t>() - 4;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t new_len = text.size();
  std::string rewritten(reinterpret_cast<const char*>(&new_len), 8);
  rewritten += text + bytes.substr(8 + header_len);
  testing::write_text(rank1, rewritten);
  edit_index([&](nlohmann::json& j) {
    j["files"]["rank-00001.safetensors"]["sha256"] = sha256_hex(rewritten);
    j["files"]["rank-00001.safetensors"]["bytes"] = rewritten.size();
  });
  auto rows = torch::empty({3, 4});
  const std::string message = error_of([&] { load_checkpoint(dir).read_rows("w", 3, rows); });
  EXPECT_EQ(message.rfind("safetensors file " + rank1.string() + ": ", 0), 0u) << message;
  EXPECT_NE(message.find("data_offsets"), std::string::npos) << message;
}

TEST_F(BrokenCheckpoint, ReadingRowsOutsideTheTensorNamesTheRange) {
  auto rows = torch::empty({2, 4});
  EXPECT_EQ(error_of([&] { load_checkpoint(dir).read_rows("w", 5, rows); }),
            "checkpoint " + dir.string() + ": tensor 'w' has rows [0, 6), asked for [5, 7)");
  EXPECT_EQ(error_of([&] { load_checkpoint(dir).read_rows("nope", 0, rows); }),
            "checkpoint " + dir.string() + ": has no tensor 'nope'");
}

TEST(SaveErrors, RowsPassedByTwoRanksOrByNoneAreRejected) {
  harness::TempDir tmp("ckpt-save-errors");
  auto w = torch::randn({6, 4});
  auto rows = [&](int64_t first, int64_t n) {
    return CheckpointTensor{"w", {6, 4}, at::kFloat, first, w.narrow(0, first, n)};
  };
  std::vector<CheckpointContent> overlap(2), gap(2);
  overlap[0].tensors = {rows(0, 4)};
  overlap[1].tensors = {rows(3, 3)};
  gap[0].tensors = {rows(0, 2)};
  gap[1].tensors = {rows(3, 3)};
  const fs::path dir = tmp / "step-000001";
  EXPECT_EQ(error_of([&] { write_checkpoint(dir, overlap, {}); }),
            "save_checkpoint " + dir.string() +
                ": rows [3, 4) of 'w' are passed by rank 0 and rank 1 (each row must come from one rank: replicas "
                "pass disjoint rows)");
  EXPECT_EQ(error_of([&] { write_checkpoint(dir, gap, {}); }),
            "save_checkpoint " + dir.string() + ": rows [2, 3) of 'w' are passed by no rank");
  EXPECT_TRUE(fs::is_empty(tmp.path()));  // failed saves leave nothing behind
}

// A model with one Linear(in, 7), as in a checkpoint saved from a different config.
struct Net : torch::nn::Module {
  explicit Net(int64_t in) { fc = register_module("fc", torch::nn::Linear(in, 7)); }
  torch::nn::Linear fc{nullptr};
};

TEST(RestoreErrors, AModelWhoseShapesDifferIsRejectedBeforeAnythingChanges) {
  harness::TempDir tmp("ckpt-shapes");
  const fs::path dir = tmp / "step-000001";
  harness::expect_ranks_pass(1, [&](harness::RankContext& ctx) {
    auto saved_net = std::make_shared<Net>(4);
    auto saved = fsdp::ShardedModel::create(saved_net, ctx.comm, {}, fsdp::wrap_nothing());
    save_checkpoint(ctx.comm, dir, sharded_state(*saved, nullptr), {});

    auto net = std::make_shared<Net>(5);
    auto model = fsdp::ShardedModel::create(net, ctx.comm, {}, fsdp::wrap_nothing());
    auto bias_before = net->fc->bias.clone();
    EXPECT_EQ(error_of([&] { restore_sharded_state(load_checkpoint(dir), *model, nullptr); }),
              "checkpoint " + dir.string() + ": model has 'fc.weight' of shape [7, 5], checkpoint has [7, 4]");
    EXPECT_TRUE(testing::bitwise_equal(net->fc->bias, bias_before));
  });
}

// `fsdpp checkpoint export` builds the model that train_state's model_config describes
// before it writes anything: a model_config fsdpp cannot build (here an unknown model_type)
// is refused naming it, with nothing written.
TEST(ExportErrors, AModelConfigThatBuildsNoModelIsRefusedBeforeAnythingIsWritten) {
  harness::TempDir tmp("ckpt-export-config");
  const nlohmann::json config = {{"model_type", "not_a_model"}, {"vocab_size", 8}};
  write_checkpoint(tmp / "step-000001", testing::split_like_fsdp({{"model/w", torch::randn({4, 2})}}, 1),
                   {{"step", 1}, {"model_config", config}});
  const auto out = tmp / "export";
  const std::string error = error_of([&] { export_hf_folder(load_checkpoint(tmp / "step-000001"), out); });
  EXPECT_NE(error.find("train_state model_config"), std::string::npos) << error;
  EXPECT_NE(error.find("not_a_model"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(out)) << "nothing is written";
}

// Net(4) under FSDP on one rank with AdamW state from one step (gradients of ones), saved
// to `dir`.
struct SteppedNet {
  std::shared_ptr<Net> net;
  std::shared_ptr<fsdp::ShardedModel> model;
  std::unique_ptr<torch::optim::AdamW> adamw;
};

SteppedNet save_stepped_net(comm::Communicator& comm, const fs::path& dir) {
  SteppedNet s;
  s.net = std::make_shared<Net>(4);
  s.model = fsdp::ShardedModel::create(s.net, comm, {}, fsdp::wrap_nothing());
  s.adamw = std::make_unique<torch::optim::AdamW>(s.model->parameters());
  for (auto& p : s.model->parameters()) p.mutable_grad() = torch::ones_like(p);
  s.adamw->step();
  save_checkpoint(comm, dir, sharded_state(*s.model, s.adamw.get()), {});
  return s;
}

// Every tensor of a checkpoint is read or refused: AdamW state of a parameter the optimizer
// restored into does not step (here one over fc.weight only) is refused naming it, not
// dropped.
TEST(RestoreErrors, AdamWStateOfAParameterTheOptimizerDoesNotStepIsRefusedNamingIt) {
  harness::TempDir tmp("ckpt-optim-subset");
  const fs::path dir = tmp / "step-000001";
  harness::expect_ranks_pass(1, [&](harness::RankContext& ctx) {
    const auto stepped = save_stepped_net(ctx.comm, dir);
    auto& model = stepped.model;
    std::vector<at::Tensor> weight_only;
    for (const auto& [name, shard] : model->named_parameters())
      if (name == "fc.weight") weight_only.push_back(shard);
    ASSERT_EQ(weight_only.size(), 1u);
    torch::optim::AdamW partial(weight_only);
    EXPECT_EQ(error_of([&] { restore_sharded_state(load_checkpoint(dir), *model, &partial); }),
              "checkpoint " + dir.string() +
                  ": has 'optim/fc.bias/exp_avg', AdamW state of 'fc.bias', which the optimizer restored into does "
                  "not step");
  });
}

// AdamW state is restored only with its step count: an index whose optimizer has no
// integer `step` for a parameter with state (none at all, or not a whole number) is refused
// naming the parameter, before anything changes.
TEST(RestoreErrors, AdamWStateWithoutAnIntegerStepIsRejectedNamingTheParameter) {
  harness::TempDir tmp("ckpt-optim-step");
  const fs::path dir = tmp / "step-000001";
  harness::expect_ranks_pass(1, [&](harness::RankContext& ctx) {
    const auto stepped = save_stepped_net(ctx.comm, dir);
    auto& model = stepped.model;
    const auto index_text = testing::read_text(dir / "index.json");
    const std::vector<std::function<void(nlohmann::json&)>> spoils = {
        [](nlohmann::json& optim) { optim.erase("step"); },
        [](nlohmann::json& optim) { optim["step"]["fc.bias"] = 1.5; }};
    for (const auto& spoil : spoils) {
      auto index = nlohmann::json::parse(index_text);
      ASSERT_TRUE(index["optimizer"].contains("step")) << index["optimizer"].dump();
      spoil(index["optimizer"]);
      index.erase("index_sha256");
      index["index_sha256"] = sha256_hex(index.dump());
      testing::write_text(dir / "index.json", index.dump());
      EXPECT_EQ(error_of([&] { restore_sharded_state(load_checkpoint(dir), *model, stepped.adamw.get()); }),
                "checkpoint " + dir.string() + ": holds AdamW state of 'fc.bias' but no integer optimizer.step for it");
    }
  });
}

}  // namespace
}  // namespace fsdpp::checkpoint
