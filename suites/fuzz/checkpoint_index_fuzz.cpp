// Fuzz target: index.json of a sharded checkpoint (format "fsdpp.checkpoint" version 1,
// core/checkpoint/CHECKPOINT.md) with its per-rank files and the trainer's train_state.
//
// At start-up two real rank files (rank-00000/00001.safetensors, written with
// io::write_safetensors as the checkpoint writer does) are put in a scratch checkpoint
// folder. Each input is written there as index.json and read four ways:
//  - `fsdpp checkpoint inspect DIR` and `... --json` (harness/cli/checkpoint_commands.cpp):
//    CheckpointReader::open, verify_all, and the summary of every tensor;
//  - CheckpointReader::open (core/checkpoint/checkpoint_reader.cpp, which parses with
//    CheckpointIndex::from_json in checkpoint_index.cpp), verify_all (sizes, sha256, and
//    every rank file's safetensors header against the index), then every tensor read;
//  - train::batch_change_note (core/train/train_checkpoint.cpp), which a resumed
//    `fsdpp train` runs on the index's train_state.
// The seeds that match the rank files are made by this target itself: make_seeds.sh runs
// it with FSDPP_FUZZ_WRITE_SEED (and FSDPP_FUZZ_TRAIN_STATE, an index.json of a real
// `fsdpp train` run whose train_state the seed takes).
//
// Expected: a std::exception naming the checkpoint, file or field. Finding: anything else
// (crash, sanitizer report, non-std exception, hang, huge allocation), or a tensor read
// back in another shape than the index's.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>

#include "core/checkpoint/checkpoint_index.h"
#include "core/checkpoint/checkpoint_reader.h"
#include "core/checkpoint/sha256.h"
#include "core/io/safetensors.h"
#include "core/train/train_checkpoint.h"
#include "harness/cli/checkpoint_commands.h"
#include "suites/fuzz/fuzz_support.h"

namespace {

namespace fs = std::filesystem;
using fsdpp::checkpoint::CheckpointIndex;

const fs::path& checkpoint_dir() {
  static const fs::path dir = fsdpp::fuzz::scratch_dir() / "step-000003";
  return dir;
}

// Two ranks' rows of a 4x3 parameter "w" with its AdamW moments, a bias "b", a 0-d "s" and
// the RNG tensor, laid out as fsdp_state and the trainer write them.
CheckpointIndex write_rank_files() {
  using fsdpp::io::NamedTensors;
  const at::Tensor w = at::arange(12, at::kFloat).reshape({4, 3});
  const NamedTensors rank0 = {{"model/w", w.narrow(0, 0, 2)},
                              {"optim/w/exp_avg", w.narrow(0, 0, 2) * 0.5},
                              {"optim/w/exp_avg_sq", w.narrow(0, 0, 2) * 0.25},
                              {"model/b", at::ones({3})},
                              {"rng/cpu", at::arange(16, at::kByte).reshape({1, 16})}};
  const NamedTensors rank1 = {{"model/w", w.narrow(0, 2, 2)},
                              {"optim/w/exp_avg", w.narrow(0, 2, 2) * 0.5},
                              {"optim/w/exp_avg_sq", w.narrow(0, 2, 2) * 0.25},
                              {"model/s", at::scalar_tensor(7.0)}};
  CheckpointIndex index;
  index.world_size = 2;
  index.mesh = {"full_shard", 2, 1};
  for (int rank : {0, 1}) {
    const std::string file = fsdpp::checkpoint::rank_file_name(rank);
    fsdpp::io::write_safetensors(checkpoint_dir() / file, rank == 0 ? rank0 : rank1,
                                 {{"format", fsdpp::checkpoint::kFormatName}});
    const auto digest = fsdpp::checkpoint::sha256_of_file(checkpoint_dir() / file);
    index.files[file] = {digest.bytes, digest.sha256, rank};
  }
  const std::string file0 = fsdpp::checkpoint::rank_file_name(0), file1 = fsdpp::checkpoint::rank_file_name(1);
  for (const char* name : {"model/w", "optim/w/exp_avg", "optim/w/exp_avg_sq"})
    index.tensors[name] = {{4, 3}, at::kFloat, {{file0, 0, 2}, {file1, 2, 4}}};
  index.tensors["model/b"] = {{3}, at::kFloat, {{file0, 0, 3}}};
  index.tensors["model/s"] = {{}, at::kFloat, {{file1, 0, 1}}};
  index.tensors["rng/cpu"] = {{1, 16}, at::kByte, {{file0, 0, 1}}};
  index.optimizer = {{"type", "adamw"}, {"step", {{"w", 3}}}};
  index.train_state = {{"format", "fsdpp.train-state"}, {"version", 1}, {"step", 3}, {"data_position", 48}};
  return index;
}

// The train_state of a real run's index.json, for the seed.
nlohmann::json train_state_of(const char* index_json) {
  std::ifstream in(index_json);
  return nlohmann::json::parse(in).at("train_state");
}

void inspect(bool json) {
  CLI::App app{"fsdpp"};
  fsdpp::cli::CheckpointCommands commands;
  commands.add_to(app);
  std::vector<std::string> args = {"fsdpp", "checkpoint", "inspect", checkpoint_dir().string()};
  if (json) args.push_back("--json");
  std::vector<char*> arg_ptrs;
  for (auto& a : args) arg_ptrs.push_back(a.data());
  app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  (void)commands.run_parsed();
}

void read_every_tensor() {
  const auto reader = fsdpp::checkpoint::CheckpointReader::open(checkpoint_dir());
  reader.verify_all();
  for (const auto& [name, entry] : reader.index().tensors) {
    const at::Tensor t = reader.read(name);
    fsdpp::fuzz::check_invariant(t.sizes().vec() == entry.shape, "tensor '" + name + "' read in another shape");
  }
}

void note_batch_change() {
  const auto index = CheckpointIndex::read(checkpoint_dir() / fsdpp::checkpoint::kIndexFileName);
  fsdpp::train::TrainConfig config;
  (void)fsdpp::train::batch_change_note(index.train_state, config, 2);
  config.deterministic = true;
  (void)fsdpp::train::batch_change_note(index.train_state, config, 1);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  std::freopen("/dev/null", "w", stdout);  // inspect prints its summary; libFuzzer reports on stderr
  fs::create_directories(checkpoint_dir());
  CheckpointIndex index = write_rank_files();
  if (const char* seeds = fsdpp::fuzz::seed_request()) {
    if (const char* real = std::getenv("FSDPP_FUZZ_TRAIN_STATE")) index.train_state = train_state_of(real);
    fsdpp::fuzz::write_file(fs::path(seeds) / fsdpp::checkpoint::kIndexFileName, index.to_json().dump(2) + "\n");
    for (const auto& [file, info] : index.files)
      fsdpp::fuzz::write_file(fs::path(seeds) / file, fsdpp::fuzz::read_file(checkpoint_dir() / file));
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdpp::fuzz::write_file(checkpoint_dir() / fsdpp::checkpoint::kIndexFileName,
                          std::string_view(reinterpret_cast<const char*>(data), size));
  fsdpp::fuzz::reader_may_reject([] { inspect(false); });
  fsdpp::fuzz::reader_may_reject([] { inspect(true); });
  fsdpp::fuzz::reader_may_reject(read_every_tensor);
  fsdpp::fuzz::reader_may_reject(note_batch_change);
  return 0;
}
