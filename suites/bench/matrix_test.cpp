// The benchmark matrix as a specification: ids, presets, filters, the commands a cell
// runs, the document cells built from measurements, and the README table. Nothing here
// trains a model (bench.smoke does, see smoke_document_test.cpp).
#include "harness/bench/matrix.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/models/presets.h"
#include "core/runtime/capabilities.h"
#include "core/runtime/threads.h"
#include "harness/bench/cell_result.h"
#include "harness/bench/cell_run.h"
#include "harness/results/baseline_table.h"
#include "harness/results/results_document.h"
#include "harness/results/stats.h"

namespace fsdpp::harness {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;

std::set<std::string> ids_of(const std::vector<BenchCell>& cells) {
  std::set<std::string> ids;
  for (const auto& c : cells) ids.insert(c.id());
  return ids;
}

bool contains(const std::vector<BenchCell>& cells, const std::string& id) { return ids_of(cells).count(id) == 1; }

const ModelShape& ref() { return model_shape("gpt2-mini256"); }
const ModelShape& tiny() { return model_shape("gpt2-tiny"); }

TEST(MatrixIds, FollowTheAgreedLayout) {
  EXPECT_EQ(fsdp_cell(ref(), "full_shard", "fp32", 2, true, false, false, false).id(),
            "gpt2-mini256/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0");
  EXPECT_EQ(fsdp_cell(tiny(), "hybrid_shard_zero2", "bf16", 4, false, true, true, true).id(),
            "gpt2-tiny/fsdp-hybrid_shard_zero2/bf16/n4/pf0-ac1-off1-det1");
  EXPECT_EQ(unsharded_cell(ref(), "fp32", 16, false, true).id(), "gpt2-mini256/unsharded/fp32/n1-gb16/ac0-det1");
  EXPECT_EQ(single_peer_cell(ref(), "bf16", 16, true).id(), "gpt2-mini256/pytorch_single/bf16/n1-gb16/ac1");
  EXPECT_EQ(peer_cell(System::PytorchDdp, ref(), "fp32", 2, false).id(), "gpt2-mini256/pytorch_ddp/fp32/n2/ac0");
  EXPECT_EQ(peer_cell(System::PytorchFsdp2, ref(), "fp32", 2, false).id(), "gpt2-mini256/pytorch_fsdp2/fp32/n2/ac0");
}

TEST(MatrixIds, AreUniqueInEveryPreset) {
  for (const auto& preset : preset_names()) {
    auto cells = preset_cells(preset);
    EXPECT_EQ(ids_of(cells).size(), cells.size()) << preset;
  }
}

TEST(MatrixModels, TheReferenceIsGpt2FourLayersWidth256Vocab8192Seq128Batch8) {
  EXPECT_EQ(ref().model_type, "gpt2");
  const auto config = models::from_scratch_config(ref().model_type, ref().size, ref().vocab_size);
  EXPECT_EQ(config["n_layer"], 4);
  EXPECT_EQ(config["n_embd"], 256);
  EXPECT_EQ(ref().vocab_size, 8192);
  EXPECT_EQ(ref().seq_len, 128);
  EXPECT_EQ(ref().batch_per_rank, 8);
  EXPECT_THROW(model_shape("gpt2-huge"), std::invalid_argument);
}

TEST(MatrixPresets, SmokeHasTheReferenceCellsItsBaselinesAndThePeers) {
  auto smoke = preset_cells("smoke");
  for (const char* id : {"gpt2-mini256/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0",
                         "gpt2-mini256/fsdp-no_shard/fp32/n2/pf1-ac0-off0-det0",
                         "gpt2-mini256/unsharded/fp32/n1-gb16/ac0-det0", "gpt2-mini256/pytorch_single/fp32/n1-gb16/ac0",
                         "gpt2-mini256/pytorch_ddp/fp32/n2/ac0", "gpt2-mini256/pytorch_fsdp2/fp32/n2/ac0"})
    EXPECT_TRUE(contains(smoke, id)) << id;
}

TEST(MatrixPresets, SmokeTouchesEveryDimensionOnTheTinyModel) {
  auto smoke = preset_cells("smoke");
  auto any = [&](auto predicate) {
    return std::any_of(smoke.begin(), smoke.end(), [&](const BenchCell& c) {
      return c.system == System::Fsdpp && !c.is_unsharded() && c.model.name() == "gpt2-tiny" && predicate(c);
    });
  };
  EXPECT_TRUE(any([](const BenchCell& c) { return c.mixed_precision == "bf16"; }));
  EXPECT_TRUE(any([](const BenchCell& c) { return c.mixed_precision == "fp16"; }));
  EXPECT_TRUE(any([](const BenchCell& c) { return c.activation_checkpointing; }));
  EXPECT_TRUE(any([](const BenchCell& c) { return c.cpu_offload; }));
  EXPECT_TRUE(any([](const BenchCell& c) { return !c.prefetch; }));
  EXPECT_TRUE(any([](const BenchCell& c) { return c.deterministic; }));
  EXPECT_TRUE(any([](const BenchCell& c) { return c.strategy == "shard_grad_op"; }));
  EXPECT_TRUE(any([](const BenchCell& c) { return c.strategy == "hybrid_shard" && c.world_size == 4; }));
  EXPECT_TRUE(any([](const BenchCell& c) { return c.strategy == "hybrid_shard_zero2" && c.world_size == 4; }));
}

TEST(MatrixPresets, EveryFsdpCellComesWithItsUnshardedBaseline) {
  for (const auto& preset : preset_names()) {
    auto cells = preset_cells(preset);
    auto ids = ids_of(cells);
    for (const auto& c : cells) {
      auto base = unsharded_baseline(c);
      if (base && preset == "gpu" && c.world_size > 1) {  // documented: one GPU cannot hold N ranks' batch
        EXPECT_EQ(ids.count(base->id()), 0u) << c.id();
      } else if (base) {
        EXPECT_EQ(ids.count(base->id()), 1u) << preset << ": " << c.id() << " lacks " << base->id();
      }
    }
  }
}

TEST(MatrixPresets, SmokeIsASubsetOfFull) {
  auto full = ids_of(preset_cells("full"));
  for (const auto& c : preset_cells("smoke")) EXPECT_EQ(full.count(c.id()), 1u) << c.id();
}

TEST(MatrixPresets, FullIsTheProductLessTheDocumentedExclusions) {
  auto full = preset_cells("full");
  auto ids = ids_of(full);
  size_t fsdp = 0;
  for (const auto& c : full)
    if (c.system == System::Fsdpp && !c.is_unsharded()) ++fsdp;
  // Per model: N=1 full_shard; N=2 three strategies; N=4 five; x 3 precisions x 2^4 flags.
  EXPECT_EQ(fsdp, model_shapes().size() * (1 + 3 + 5) * 3 * 16);
  for (const auto& model : model_shapes())
    for (const char* strategy : {"full_shard", "shard_grad_op", "no_shard"})
      for (const char* mp : {"fp32", "bf16", "fp16"})
        for (bool pf : {false, true})
          for (bool ac : {false, true})
            for (bool off : {false, true})
              for (bool det : {false, true})
                EXPECT_EQ(ids.count(fsdp_cell(model, strategy, mp, 2, pf, ac, off, det).id()), 1u);
  EXPECT_EQ(ids.count(fsdp_cell(tiny(), "hybrid_shard", "fp32", 4, true, false, false, false).id()), 1u);
  EXPECT_EQ(ids.count(fsdp_cell(tiny(), "hybrid_shard", "fp32", 2, true, false, false, false).id()), 0u);
  EXPECT_EQ(ids.count(fsdp_cell(tiny(), "no_shard", "fp32", 1, true, false, false, false).id()), 0u);
  EXPECT_EQ(ids.count(peer_cell(System::PytorchDdp, model_shape("gpt2-355M"), "bf16", 4, true).id()), 1u);
}

TEST(MatrixPresets, GpuRunsBothGpuModelsInBf16AtEveryWorldSizeBesideFsdp2) {
  auto gpu = preset_cells("gpu");
  for (const char* model : {"gpt2-124M-s1024", "llama-1B-s2048"}) {
    for (int n : {1, 2, 4, 8}) {
      for (bool ac : {false, true}) {
        const auto& shape = model_shape(model);
        EXPECT_TRUE(contains(gpu, fsdp_cell(shape, "full_shard", "bf16", n, true, ac, false, false).id()));
        EXPECT_TRUE(contains(gpu, peer_cell(System::PytorchFsdp2, shape, "bf16", n, ac).id()));
        EXPECT_EQ(contains(gpu, single_peer_cell(shape, "bf16", shape.batch_per_rank, ac).id()), true);
      }
    }
  }
  EXPECT_EQ(gpu.size(), 2u * (4 * 2 * 2 + 2 * 2));  // per model: 4 N x 2 AC x (fsdpp, fsdp2) + N=1's two
  for (const auto& c : gpu) EXPECT_EQ(c.mixed_precision, "bf16") << c.id();
  // Each fsdpp cell is followed by its FSDP2 peer, so that drift in clocks hits both.
  for (size_t i = 0; i + 1 < gpu.size(); ++i) {
    if (gpu[i].system == System::Fsdpp && !gpu[i].is_unsharded()) {
      EXPECT_TRUE(gpu[i + 1].system == System::PytorchFsdp2 && gpu[i + 1].world_size == gpu[i].world_size)
          << gpu[i].id();
    }
  }
  EXPECT_EQ(model_shape("llama-1B-s2048").seq_len, 2048);
  EXPECT_EQ(model_shape("gpt2-124M-s1024").batch_per_rank, 8);
  EXPECT_EQ(model_shape("gpt2-124M").seq_len, 256);  // the CPU shape keeps its name
}

TEST(MatrixPresets, FamiliesRunQwen3AndMixtralFullShardBesideFsdp2OnTheCpuAndLeaveSmokeAsItWas) {
  auto families = preset_cells("families");
  ASSERT_EQ(family_model_shapes().size(), 2u);
  for (const char* model : {"qwen3-mini", "mixtral-mini"}) {
    const auto& shape = model_shape(model);
    EXPECT_EQ(shape.vocab_size, 8192) << model;
    EXPECT_EQ(shape.seq_len, 128) << model;
    const auto fs = fsdp_cell(shape, "full_shard", "fp32", 2, true, false, false, false);
    EXPECT_TRUE(contains(families, fs.id())) << model;
    EXPECT_TRUE(contains(families, peer_cell(System::PytorchFsdp2, shape, "fp32", 2, false).id())) << model;
    EXPECT_TRUE(contains(families, unsharded_baseline(fs)->id())) << model;
  }
  EXPECT_EQ(families.size(), 2u * 3);  // per model: fsdpp, its FSDP2 peer, the unsharded baseline
  // Each fsdpp cell is followed by its FSDP2 peer, so that drift in clocks hits both.
  for (size_t i = 0; i + 1 < families.size(); ++i) {
    if (families[i].system == System::Fsdpp && !families[i].is_unsharded()) {
      EXPECT_TRUE(peer_matches(families[i + 1], families[i])) << families[i].id();
    }
  }
  for (const auto& c : preset_cells("smoke")) EXPECT_EQ(c.model.model_type, "gpt2") << c.id();
  for (const auto& c : preset_cells("full")) EXPECT_EQ(c.model.model_type, "gpt2") << c.id();
}

TEST(MatrixPresets, UnknownPresetIsAnErrorListingTheKnownOnes) {
  try {
    preset_cells("nightly");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("nightly"), std::string::npos);
    for (const auto& known : preset_names()) EXPECT_NE(std::string(e.what()).find(known), std::string::npos) << known;
  }
}

TEST(MatrixFilter, SelectsExactlyTheCellsWhoseIdMatches) {
  auto smoke = preset_cells("smoke");
  auto selected = filter_cells(smoke, "fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0$");
  EXPECT_EQ(ids_of(selected), (std::set<std::string>{"gpt2-mini256/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0",
                                                     "gpt2-tiny/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0"}));
  for (const auto& c : filter_cells(smoke, "^gpt2-tiny/")) EXPECT_EQ(c.model.name(), "gpt2-tiny");
  auto n4 = filter_cells(smoke, "/n4/");
  ASSERT_EQ(n4.size(), 2u);
  for (const auto& c : n4) EXPECT_EQ(c.strategy.rfind("hybrid", 0), 0u) << c.id();
  EXPECT_EQ(filter_cells(smoke, "").size(), smoke.size());
  EXPECT_TRUE(filter_cells(smoke, "no-such-cell").empty());
  // The filter keeps the preset's order.
  auto peers = filter_cells(smoke, "pytorch_");
  ASSERT_EQ(peers.size(), 3u);
  EXPECT_EQ(peers[0].system, System::PytorchSingle);
  EXPECT_EQ(peers[1].system, System::PytorchDdp);
}

TEST(MatrixFilter, MalformedRegexIsAnErrorNamingIt) {
  try {
    filter_cells(preset_cells("smoke"), "fsdp-(full");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp-(full"), std::string::npos);
  }
}

TEST(MatrixFilter, WithBaselinesAddsEachMissingBaselineOnce) {
  auto selected = filter_cells(preset_cells("smoke"), "^gpt2-tiny/fsdp-full_shard/fp32/n2/pf[01]-ac0-off0-det0$");
  ASSERT_EQ(selected.size(), 2u);  // prefetch on and off: one baseline
  auto all = with_baselines(selected);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].id(), "gpt2-tiny/unsharded/fp32/n1-gb8/ac0-det0");
  EXPECT_EQ(all[2].batch_per_rank, 8);
  EXPECT_EQ(with_baselines(all).size(), 3u);
}

TEST(MatrixFilter, SelectingKeepsThePresetsBaselinesAndAddsNoOther) {
  auto smoke = preset_cells("smoke");
  const std::string tiny_fs = "^gpt2-tiny/fsdp-full_shard/fp32/n2/pf[01]-ac0-off0-det0$";
  EXPECT_EQ(ids_of(select_cells(smoke, tiny_fs)), ids_of(with_baselines(filter_cells(smoke, tiny_fs))));
  auto gpu = preset_cells("gpu");
  auto n1 = select_cells(gpu, "^llama-1B-s2048/fsdp-full_shard/bf16/n1/pf1-ac0");
  ASSERT_EQ(n1.size(), 2u);
  EXPECT_EQ(n1[1].id(), "llama-1B-s2048/unsharded/bf16/n1-gb4/ac0-det0");
  auto n2 = select_cells(gpu, "^llama-1B-s2048/fsdp-full_shard/bf16/n2/");
  ASSERT_EQ(n2.size(), 2u);  // AC off and on; the preset has no baseline for them
  for (const auto& c : n2) EXPECT_FALSE(c.is_unsharded()) << c.id();
}

TEST(MatrixPeers, Fsdp2MatchesSameRanksAndBatchPerRank) {
  const auto& llama = model_shape("llama-1B-s2048");
  auto fs = fsdp_cell(llama, "full_shard", "bf16", 2, true, true, false, false);
  EXPECT_TRUE(peer_matches(peer_cell(System::PytorchFsdp2, llama, "bf16", 2, true), fs));
  EXPECT_FALSE(peer_matches(peer_cell(System::PytorchFsdp2, llama, "bf16", 1, true), fs));
  EXPECT_FALSE(peer_matches(peer_cell(System::PytorchFsdp2, llama, "bf16", 2, false), fs));
  EXPECT_FALSE(peer_matches(peer_cell(System::PytorchFsdp2, model_shape("gpt2-124M-s1024"), "bf16", 2, true), fs));
  // The unsharded baseline is compared with pytorch_single, not with FSDP2 on one rank.
  EXPECT_FALSE(peer_matches(peer_cell(System::PytorchFsdp2, llama, "bf16", 1, false),
                            unsharded_cell(llama, "bf16", llama.batch_per_rank, false, false)));
}

TEST(MatrixPeers, DdpMatchesSameRanksAndBatchSingleMatchesSameGlobalBatch) {
  auto fs = fsdp_cell(ref(), "full_shard", "fp32", 2, true, false, false, false);
  EXPECT_TRUE(peer_matches(peer_cell(System::PytorchDdp, ref(), "fp32", 2, false), fs));
  EXPECT_FALSE(peer_matches(peer_cell(System::PytorchDdp, ref(), "fp32", 4, false), fs));
  EXPECT_FALSE(peer_matches(peer_cell(System::PytorchDdp, ref(), "bf16", 2, false), fs));
  EXPECT_FALSE(peer_matches(peer_cell(System::PytorchDdp, ref(), "fp32", 2, true), fs));
  EXPECT_TRUE(peer_matches(single_peer_cell(ref(), "fp32", 16, false), fs));
  EXPECT_FALSE(peer_matches(single_peer_cell(ref(), "fp32", 8, false), fs));
  EXPECT_TRUE(
      peer_matches(single_peer_cell(ref(), "fp32", 16, false), unsharded_cell(ref(), "fp32", 16, false, false)));
}

// --- The commands a repetition runs -------------------------------------------------

std::string flag_value(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it == argv.end() || it + 1 == argv.end() ? std::string("<absent>") : *(it + 1);
}

bool has_flag(const std::vector<std::string>& argv, const std::string& flag) {
  return std::find(argv.begin(), argv.end(), flag) != argv.end();
}

TEST(CellCommand, FsdppCellsRunBenchStepWithTheirConfiguration) {
  CellRunSetup setup;
  setup.cores = 8;
  setup.fsdpp_binary = "/bin/fsdpp";
  setup.inject_delay_pct = 25;
  auto argv =
      cell_command(fsdp_cell(tiny(), "hybrid_shard", "bf16", 4, false, true, true, true), setup, "r.json", "c.json");
  EXPECT_EQ(argv[0], "/bin/fsdpp");
  EXPECT_EQ(argv[1], "bench-step");
  EXPECT_EQ(flag_value(argv, "--nproc"), "4");
  EXPECT_EQ(flag_value(argv, "--threads"), "2");
  EXPECT_EQ(flag_value(argv, "--strategy"), "hybrid_shard");
  EXPECT_EQ(flag_value(argv, "--mixed-precision"), "bf16");
  EXPECT_EQ(flag_value(argv, "--batch-size"), std::to_string(tiny().batch_per_rank));
  EXPECT_EQ(flag_value(argv, "--steps"), std::to_string(tiny().timed_steps));
  EXPECT_EQ(flag_value(argv, "--inject-delay-pct"), "25");
  EXPECT_EQ(flag_value(argv, "--out"), "r.json");
  for (const char* flag : {"--no-prefetch", "--activation-checkpointing", "--cpu-offload", "--deterministic"})
    EXPECT_TRUE(has_flag(argv, flag)) << flag;

  auto base = cell_command(unsharded_cell(ref(), "fp32", 16, false, false), setup, "r.json", "c.json");
  EXPECT_EQ(flag_value(base, "--nproc"), "1");
  EXPECT_EQ(flag_value(base, "--threads"), "8");  // one process: every core
  EXPECT_EQ(flag_value(base, "--batch-size"), "16");
  EXPECT_EQ(flag_value(base, "--strategy"), "unsharded");
  EXPECT_FALSE(has_flag(base, "--no-prefetch"));
}

TEST(CellCommand, PeersRunTorchPeerWithTheSameShapeAndThreadBudget) {
  CellRunSetup setup;
  setup.cores = 8;
  setup.python = "/usr/bin/python3";
  setup.peer_script = "peer.py";
  setup.inject_delay_pct = 25;
  auto ddp = cell_command(peer_cell(System::PytorchDdp, ref(), "fp32", 2, false), setup, "r.json", "c.json");
  EXPECT_EQ(ddp[0], "/usr/bin/python3");
  EXPECT_EQ(ddp[1], "peer.py");
  EXPECT_EQ(flag_value(ddp, "--mode"), "ddp");
  EXPECT_EQ(flag_value(ddp, "--nproc"), "2");
  EXPECT_EQ(flag_value(ddp, "--threads"), "4");
  EXPECT_EQ(flag_value(ddp, "--batch-size"), "8");
  EXPECT_EQ(flag_value(ddp, "--seq-len"), "128");
  EXPECT_EQ(flag_value(ddp, "--model-config"), "c.json");
  EXPECT_FALSE(has_flag(ddp, "--inject-delay-pct"));
  // On the CPU the peers start from fsdpp's init (an HF folder beside the config) and train
  // on bench-step's batches; on CUDA they draw their own.
  EXPECT_EQ(flag_value(ddp, "--weights"), "init");
  EXPECT_TRUE(has_flag(ddp, "--fixed-batch"));
  auto single = cell_command(single_peer_cell(ref(), "bf16", 16, true), setup, "r.json", "c.json");
  EXPECT_EQ(flag_value(single, "--mode"), "single");
  EXPECT_FALSE(has_flag(single, "--nproc"));
  EXPECT_EQ(flag_value(single, "--threads"), "8");
  EXPECT_EQ(flag_value(single, "--batch-size"), "16");
  EXPECT_EQ(flag_value(single, "--mixed-precision"), "bf16");
  EXPECT_TRUE(has_flag(single, "--activation-checkpointing"));
  EXPECT_EQ(flag_value(single, "--adam-impl"), "foreach");  // PyTorch 1.13's fastest CPU AdamW
  setup.device = "cuda";
  for (auto system : {System::PytorchFsdp2, System::PytorchSingle}) {
    auto on_gpu = cell_command(peer_cell(system, ref(), "bf16", 1, false), setup, "r.json", "c.json");
    EXPECT_EQ(flag_value(on_gpu, "--adam-impl"), "fused");  // as fsdpp's FusedAdamW on CUDA
    EXPECT_FALSE(has_flag(on_gpu, "--weights"));
    EXPECT_FALSE(has_flag(on_gpu, "--fixed-batch"));
  }
}

TEST(CellCommand, WithAProfileDirEveryCellOfBothSystemsTracesIntoItsOwnFile) {
  CellRunSetup setup;
  setup.peer_script = "peer.py";
  auto fs = fsdp_cell(tiny(), "full_shard", "fp32", 2, true, false, false, false);
  auto ddp = peer_cell(System::PytorchDdp, ref(), "fp32", 2, false);
  EXPECT_FALSE(has_flag(cell_command(fs, setup, "r.json", "c.json"), "--profile-trace"));
  setup.profile_dir = "prof";
  const auto fs_trace = flag_value(cell_command(fs, setup, "r.json", "c.json"), "--profile-trace");
  const auto ddp_trace = flag_value(cell_command(ddp, setup, "r.json", "c.json"), "--profile-trace");
  EXPECT_EQ(fs_trace, "prof/gpt2-tiny__fsdp-full_shard__fp32__n2__pf1-ac0-off0-det0.trace.json");
  EXPECT_EQ(ddp_trace, "prof/" + profile_trace_name(ddp));
  EXPECT_NE(fs_trace, ddp_trace);
}

TEST(CellCommand, OnCpuEveryRankOfBothSystemsIsPinnedToItsOwnCoresUnlessBindingIsOff) {
  CellRunSetup setup;
  setup.cores = 2;
  setup.peer_script = "peer.py";
  setup.python = "/opt/peer/bin/python";
  auto fs = fsdp_cell(tiny(), "full_shard", "fp32", 2, true, false, false, false);
  auto ddp = peer_cell(System::PytorchDdp, ref(), "fp32", 2, false);
  auto single = single_peer_cell(ref(), "fp32", 16, false);
  ASSERT_TRUE(binds_cores(setup));  // the default on CPU
  EXPECT_TRUE(has_flag(cell_command(fs, setup, "r.json", "c.json"), "--bind-cores"));
  EXPECT_TRUE(has_flag(cell_command(ddp, setup, "r.json", "c.json"), "--bind-cores"));
  // The single-process peer has no launcher: its OpenMP threads are bound by its environment.
  auto single_argv = cell_command(single, setup, "r.json", "c.json");
  EXPECT_THAT(std::vector<std::string>(single_argv.begin(), single_argv.begin() + 4),
              ElementsAre("env", "OMP_PROC_BIND=close", "OMP_PLACES=threads", setup.python));
  EXPECT_FALSE(has_flag(single_argv, "--bind-cores"));

  CellRunSetup off = setup;
  off.bind_cores = false;  // fsdpp bench --no-bind-cores
  EXPECT_FALSE(binds_cores(off));
  for (const auto& cell : {fs, ddp, single}) {
    auto argv = cell_command(cell, off, "r.json", "c.json");
    EXPECT_FALSE(has_flag(argv, "--bind-cores")) << cell.id();
    EXPECT_NE(argv[0], "env") << cell.id();
  }
  CellRunSetup cuda;
  cuda.device = "cuda";
  EXPECT_FALSE(binds_cores(cuda));  // host threads only feed the GPU
  EXPECT_FALSE(has_flag(cell_command(fs, cuda, "r.json", "c.json"), "--bind-cores"));
}

TEST(CellAvailability, Fp16WhereTheCpuLacksItsKernelsAndRanksBeyondTheGpusAreUnavailable) {
  CellRunSetup cpu;
  auto fp16 = fsdp_cell(tiny(), "full_shard", "fp16", 2, true, false, false, false);
  auto reason = unavailable_reason(fp16, cpu);
  EXPECT_EQ(reason.has_value(), !runtime::cpu_has_fp16_kernels());
  if (reason) {
    EXPECT_NE(reason->find("fp16"), std::string::npos) << *reason;
  }
  CellRunSetup cuda;
  cuda.device = "cuda";
  cuda.gpus = 8;
  EXPECT_FALSE(unavailable_reason(fp16, cuda).has_value());
  EXPECT_FALSE(unavailable_reason(fsdp_cell(tiny(), "full_shard", "bf16", 2, true, false, false, false), cpu));
  auto peer_fp16 = unavailable_reason(peer_cell(System::PytorchDdp, tiny(), "fp16", 2, false), cuda);
  ASSERT_TRUE(peer_fp16.has_value());
  CellRunSetup one_gpu = cuda;
  one_gpu.gpus = 1;
  for (auto system : {System::Fsdpp, System::PytorchFsdp2}) {
    auto two_ranks = system == System::Fsdpp ? fsdp_cell(tiny(), "full_shard", "bf16", 2, true, false, false, false)
                                             : peer_cell(system, tiny(), "bf16", 2, false);
    auto needs_two = unavailable_reason(two_ranks, one_gpu);
    ASSERT_TRUE(needs_two.has_value()) << two_ranks.id();
    EXPECT_EQ(*needs_two, "needs 2 GPUs, one per rank; this machine has 1");
    EXPECT_FALSE(unavailable_reason(fsdp_cell(tiny(), "full_shard", "bf16", 1, true, false, false, false), one_gpu));
  }
  CellRunSetup no_python;
  no_python.python = "/nonexistent/python3";
  auto missing = unavailable_reason(peer_cell(System::PytorchDdp, tiny(), "fp32", 2, false), no_python);
  ASSERT_TRUE(missing.has_value());
  EXPECT_NE(missing->find("/nonexistent/python3"), std::string::npos) << *missing;
}

// --- Document cells from measurements -----------------------------------------------

// A repetition of a CPU fsdpp cell as bench-step reports it, with the given step times and
// peak resident set (its tensor peak is a tenth of it).
RepetitionResult fsdpp_repetition(const std::vector<double>& step_ms, double peak_bytes) {
  RepetitionResult r;
  r.step_ms = step_ms;
  r.record = {{"parameters", 5000000},
              {"adamw_step", "per-tensor"},
              {"host_heap", "kept"},
              {"model_flops_per_token", 3.0e7},
              {"matmul_peak_flops_per_s", 1.0e11},
              {"memory_bytes",
               {{"max_over_ranks",
                 {{"persistent_after_setup", 1.0e7},
                  {"persistent_between_steps", 3.0e7},
                  {"peak_allocated", peak_bytes / 10},
                  {"rss_between_steps", 4.0e8},
                  {"rss_peak", peak_bytes}}}}},
              {"comm",
               {{"all_gather", {{"bytes_sent_per_step", 3000.0}}},
                {"reduce_scatter", {{"bytes_sent_per_step", 2000.0}}},
                {"all_reduce", {{"bytes_sent_per_step", 8.0}}}}},
              {"comm_ms_per_step", 10.0},
              {"exposed_comm_ms_per_step", 4.0}};
  return r;
}

RepetitionResult peer_repetition(const std::vector<double>& step_ms) {
  RepetitionResult r;
  r.step_ms = step_ms;
  r.record = {
      {"parameters", 5000000},
      {"config", {{"adam_impl", "fused"}}},
      {"matmul_peak", {{"flops_per_s", 2.0e11}}},
      {"memory",
       {{"per_rank", json::array({{{"peak_rss_measured_bytes", 6.0e8}}, {{"peak_rss_measured_bytes", 7.0e8}}})}}}};
  return r;
}

CellOutcome outcome(const BenchCell& cell, std::vector<RepetitionResult> reps) {
  CellOutcome o;
  o.cell = cell;
  o.repetitions_requested = static_cast<int>(reps.size());
  for (const auto& r : reps) {
    double s = 0;
    for (double ms : r.step_ms) s += ms / 1e3;
    o.repetition_seconds.push_back(s);
  }
  o.repetitions = std::move(reps);
  return o;
}

const json& cell_with_id(const json& cells, const std::string& id) {
  for (const auto& c : cells)
    if (c["id"] == id) return c;
  throw std::runtime_error("no cell " + id);
}

double value(const json& cell, const std::string& metric) { return cell["metrics"][metric]["value"].get<double>(); }

class DocumentCells : public ::testing::Test {
 protected:
  BenchCell fs = fsdp_cell(ref(), "full_shard", "fp32", 2, true, false, false, false);
  BenchCell base = unsharded_cell(ref(), "fp32", 16, false, false);
  BenchCell single = single_peer_cell(ref(), "fp32", 16, false);
  BenchCell ddp = peer_cell(System::PytorchDdp, ref(), "fp32", 2, false);
  std::vector<CellOutcome> outcomes = {
      outcome(fs,
              {fsdpp_repetition({100, 110, 120, 130, 140}, 9.0e8), fsdpp_repetition({90, 100, 100, 100, 400}, 9.5e8)}),
      outcome(base, {fsdpp_repetition({80, 80, 80, 80, 80}, 8.0e8), fsdpp_repetition({80, 80, 80, 80, 80}, 8.0e8)}),
      outcome(single, {peer_repetition({64, 64, 64, 64, 64}), peer_repetition({64, 64, 64, 64, 64})}),
      outcome(ddp, {peer_repetition({200, 200, 200, 200, 200}), peer_repetition({200, 200, 200, 200, 200})}),
  };
};

TEST_F(DocumentCells, StepStatisticsArePooledOverEveryTimedStepOfEveryRepetition) {
  auto cells = results_cells(outcomes);
  const auto& c = cell_with_id(cells, fs.id());
  std::vector<double> pooled = {100, 110, 120, 130, 140, 90, 100, 100, 100, 400};
  EXPECT_EQ(c["samples"]["step_ms"]["values"].get<std::vector<double>>(), pooled);
  EXPECT_DOUBLE_EQ(value(c, "step_ms_median"), 105);
  EXPECT_DOUBLE_EQ(value(c, "step_ms_min"), 90);
  EXPECT_DOUBLE_EQ(value(c, "step_ms_iqr"), results::iqr(pooled));
  EXPECT_DOUBLE_EQ(value(c, "step_ms_cv"), results::cv(pooled));
}

TEST_F(DocumentCells, TokensPerSecondIsTheMedianRepetitionsGlobalTokensOverItsTime) {
  auto cells = results_cells(outcomes);
  const auto& c = cell_with_id(cells, fs.id());
  const double tokens = 16.0 * 128 * 5;  // global batch x seq x timed steps
  std::vector<double> per_rep = {tokens / 0.600, tokens / 0.790};
  auto samples = c["samples"]["tokens_per_s"]["values"].get<std::vector<double>>();
  ASSERT_EQ(samples.size(), per_rep.size());
  for (size_t r = 0; r < samples.size(); ++r) EXPECT_DOUBLE_EQ(samples[r], per_rep[r]);
  EXPECT_DOUBLE_EQ(value(c, "tokens_per_s"), results::median(per_rep));
  // Per rank: FLOPs per token x tokens/s / 2 ranks, against the rank's matmul peak.
  EXPECT_DOUBLE_EQ(value(c, "achieved_flops_per_s"), 3.0e7 * results::median(per_rep) / 2);
  EXPECT_DOUBLE_EQ(value(c, "mfu"), 3.0e7 * results::median(per_rep) / 2 / 1.0e11);
}

TEST_F(DocumentCells, DatasheetMfuIsAchievedOverTheNamedGpusBf16PeakAndNullElsewhere) {
  // fp32 cells and records without a device name have no datasheet figure.
  auto fp32 = cell_with_id(results_cells(outcomes), fs.id());
  EXPECT_TRUE(fp32["metrics"]["mfu_datasheet"]["value"].is_null());
  EXPECT_TRUE(fp32["metrics"]["datasheet_peak_flops_per_s"]["value"].is_null());

  const BenchCell bf16 = fsdp_cell(ref(), "full_shard", "bf16", 2, true, false, false, false);
  auto named = [&](const std::string& device) {
    auto rep = fsdpp_repetition({100, 100, 100, 100, 100}, 9.0e8);
    rep.record["device_name"] = device;
    return outcome(bf16, {rep, rep});
  };
  const auto h200 = cell_with_id(results_cells({named("NVIDIA H200")}), bf16.id());
  const double achieved = value(h200, "achieved_flops_per_s");
  EXPECT_DOUBLE_EQ(value(h200, "datasheet_peak_flops_per_s"), 989e12);
  EXPECT_DOUBLE_EQ(value(h200, "mfu_datasheet"), achieved / 989e12);
  EXPECT_DOUBLE_EQ(value(h200, "mfu"), achieved / 1.0e11);  // the timed matmul's, beside it
  EXPECT_DOUBLE_EQ(value(cell_with_id(results_cells({named("NVIDIA H100 PCIe")}), bf16.id()), "mfu_datasheet"),
                   achieved / 756e12);
  EXPECT_TRUE(cell_with_id(results_cells({named("cpu")}), bf16.id())["metrics"]["mfu_datasheet"]["value"].is_null());
}

TEST_F(DocumentCells, ComparisonsAreRatiosToTheBaselineAndThePeersMeasuredInTheSameRun) {
  auto cells = results_cells(outcomes);
  const auto& c = cell_with_id(cells, fs.id());
  EXPECT_DOUBLE_EQ(value(c, "overhead_vs_unsharded"), 105.0 / 80.0);
  const double fs_tokens = value(c, "tokens_per_s");
  EXPECT_DOUBLE_EQ(value(c, "tokens_per_s_ratio_vs_pytorch_ddp"), fs_tokens / (16.0 * 128 * 5 / 1.0));
  EXPECT_DOUBLE_EQ(value(c, "tokens_per_s_ratio_vs_pytorch_single"), fs_tokens / (16.0 * 128 * 5 / 0.32));
  const auto& b = cell_with_id(cells, base.id());
  EXPECT_TRUE(b["metrics"]["overhead_vs_unsharded"]["value"].is_null());              // not its own baseline
  EXPECT_TRUE(b["metrics"]["tokens_per_s_ratio_vs_pytorch_ddp"]["value"].is_null());  // no DDP on one rank
  EXPECT_DOUBLE_EQ(value(b, "tokens_per_s_ratio_vs_pytorch_single"), 64.0 / 80.0);
}

TEST_F(DocumentCells, Fsdp2OnTheSameRanksGivesTokensAndPeakMemoryRatios) {
  EXPECT_TRUE(cell_with_id(results_cells(outcomes), fs.id())["metrics"]["tokens_per_s_ratio_vs_pytorch_fsdp2"]["value"]
                  .is_null());  // no FSDP2 cell ran
  outcomes.push_back(
      outcome(peer_cell(System::PytorchFsdp2, ref(), "fp32", 2, false), {peer_repetition({50, 50, 50, 50, 50})}));
  outcomes.push_back(
      outcome(peer_cell(System::PytorchFsdp2, ref(), "fp32", 4, false), {peer_repetition({5, 5, 5, 5, 5})}));
  auto cells = results_cells(outcomes);
  const auto& c = cell_with_id(cells, fs.id());
  EXPECT_DOUBLE_EQ(value(c, "tokens_per_s_ratio_vs_pytorch_fsdp2"), value(c, "tokens_per_s") / (16.0 * 128 * 5 / 0.25));
  EXPECT_DOUBLE_EQ(value(c, "peak_bytes_ratio_vs_pytorch_fsdp2"), 9.5e8 / 7.0e8);  // larger repetition / larger rank
  EXPECT_EQ(c["metrics"]["peak_bytes_ratio_vs_pytorch_fsdp2"]["better"], "lower");
  EXPECT_TRUE(cell_with_id(cells, base.id())["metrics"]["tokens_per_s_ratio_vs_pytorch_fsdp2"]["value"].is_null());
}

// Loss curves: a peer that started from fsdpp's init on its batches (its record's
// config has weights and fixed_batch) on the same ranks gets compared step by step.
RepetitionResult with_losses(RepetitionResult r, const std::vector<double>& losses, bool started_as_fsdpp) {
  r.record["losses"] = losses;
  if (started_as_fsdpp) {
    r.record["config"]["weights"] = "work/init";
    r.record["config"]["fixed_batch"] = true;
  }
  return r;
}

TEST_F(DocumentCells, LossCurvesOfPeersThatStartedAsFsdppAreComparedStepByStep) {
  auto fsdp2 = peer_cell(System::PytorchFsdp2, ref(), "fp32", 2, false);
  outcomes[0].repetitions[0] = with_losses(outcomes[0].repetitions[0], {10.5, 10.25, 10.0, 9.75, 9.5}, false);
  outcomes[0].repetitions[1] = with_losses(outcomes[0].repetitions[1], {10.5, 10.25, 10.0, 9.75, 9.5}, false);
  outcomes.push_back(outcome(
      fsdp2, {with_losses(peer_repetition({50, 50, 50, 50, 50}), {10.5, 10.25, 10.0, 9.75, 9.5 + 2e-6}, true),
              with_losses(peer_repetition({50, 50, 50, 50, 50}), {10.5, 10.25 - 3e-6, 10.0, 9.75, 9.5}, true)}));
  // The DDP peer drew its own init and data: no comparison, though it logged losses.
  outcomes[3].repetitions[0] = with_losses(outcomes[3].repetitions[0], {11, 11, 11, 11, 11}, false);
  outcomes[3].repetitions[1] = with_losses(outcomes[3].repetitions[1], {11, 11, 11, 11, 11}, false);
  auto cells = results_cells(outcomes);
  const auto& c = cell_with_id(cells, fs.id());
  EXPECT_NEAR(value(c, "loss_max_abs_diff_vs_pytorch_fsdp2"), 3e-6, 1e-12);
  EXPECT_EQ(c["metrics"]["loss_max_abs_diff_vs_pytorch_fsdp2"]["unit"], "nats");
  EXPECT_TRUE(c["metrics"]["loss_max_abs_diff_vs_pytorch_ddp"]["value"].is_null());
  EXPECT_TRUE(c["metrics"]["loss_max_abs_diff_vs_pytorch_single"]["value"].is_null()) << "another batch shape";
  EXPECT_EQ(c["samples"]["loss"]["values"].size(), 10u);
  EXPECT_EQ(cell_with_id(cells, fsdp2.id())["config"]["started_as_fsdpp"], true);
  EXPECT_EQ(cell_with_id(cells, ddp.id())["config"]["started_as_fsdpp"], false);
}

TEST_F(DocumentCells, MemoryAndCommunicationComeFromTheRecords) {
  auto cells = results_cells(outcomes);
  const auto& c = cell_with_id(cells, fs.id());
  EXPECT_DOUBLE_EQ(value(c, "peak_bytes_per_rank"), 9.5e8);  // the larger repetition
  EXPECT_DOUBLE_EQ(value(c, "persistent_bytes_per_rank"), 4.0e8);
  EXPECT_DOUBLE_EQ(value(c, "peak_allocated_bytes_per_rank"), 9.5e7);  // tensors: the counting allocator's
  EXPECT_DOUBLE_EQ(value(c, "persistent_after_setup_bytes_per_rank"), 1.0e7);
  EXPECT_DOUBLE_EQ(value(c, "comm_bytes_per_step_all_gather"), 3000);
  EXPECT_DOUBLE_EQ(value(c, "comm_bytes_per_step_reduce_scatter"), 2000);
  EXPECT_DOUBLE_EQ(value(c, "comm_ms_per_step"), 10);
  EXPECT_DOUBLE_EQ(value(c, "exposed_comm_fraction"), 0.4);
  const auto& d = cell_with_id(cells, ddp.id());
  EXPECT_DOUBLE_EQ(value(d, "peak_bytes_per_rank"), 7.0e8);  // the larger rank
  EXPECT_DOUBLE_EQ(value(d, "matmul_peak_flops_per_s"), 2.0e11);
  // Peers' FLOPs per token are fsdpp's formula for the same model (from its cells).
  EXPECT_DOUBLE_EQ(value(d, "achieved_flops_per_s"), 3.0e7 * (16.0 * 128 * 5 / 1.0) / 2);
  EXPECT_EQ(d["config"]["parameters"], 5000000);
  EXPECT_EQ(d["config"]["adamw_step"], "fused");       // the peer's --adam-impl
  EXPECT_EQ(c["config"]["adamw_step"], "per-tensor");  // what bench-step's optimizer ran
  EXPECT_EQ(c["config"]["host_heap"], "kept");
  EXPECT_FALSE(d["config"].contains("host_heap"));  // the peers' is glibc's, not ours to report
}

TEST_F(DocumentCells, AFailedBaselineOrPeerLeavesTheComparisonNull) {
  outcomes[1].status = "failed";
  outcomes[1].reason = "rank 0 crashed";
  outcomes[3].status = "unavailable";
  outcomes[3].reason = "no python";
  auto cells = results_cells(outcomes);
  const auto& c = cell_with_id(cells, fs.id());
  EXPECT_TRUE(c["metrics"]["overhead_vs_unsharded"]["value"].is_null());
  EXPECT_TRUE(c["metrics"]["tokens_per_s_ratio_vs_pytorch_ddp"]["value"].is_null());
  EXPECT_FALSE(c["metrics"]["tokens_per_s_ratio_vs_pytorch_single"]["value"].is_null());
  const auto& b = cell_with_id(cells, base.id());
  EXPECT_EQ(b["status"], "failed");
  EXPECT_EQ(b["reason"], "rank 0 crashed");
  EXPECT_TRUE(b["metrics"].empty());
}

TEST_F(DocumentCells, MakeADocumentTheSchemaAccepts) {
  outcomes[3].status = "unavailable";
  outcomes[3].reason = "no python";
  auto doc = results::new_document({"fsdpp", "bench", "--preset", "smoke"}, "smoke");
  doc["cells"] = results_cells(outcomes);
  EXPECT_NO_THROW(results::validate_results(doc, "test"));
  doc["cells"][0]["config"]["injected_delay_pct"] = 10;
  EXPECT_NO_THROW(results::validate_results(doc, "test"));
}

// --- The README table ---------------------------------------------------------------

TEST_F(DocumentCells, BaselineTableShowsEveryRowWithRatiosFromTheDocument) {
  auto doc = results::new_document({"fsdpp", "bench"}, "smoke");
  doc["cells"] = results_cells(outcomes);
  std::string table = results::baseline_table(doc);
  EXPECT_NE(table.find("gpt2-mini256 (4 layers, d=256)"), std::string::npos) << table;
  for (const char* row :
       {"| fsdpp FULL_SHARD |", "| fsdpp NO_SHARD |", "| fsdpp unsharded |", "| PyTorch single |", "| PyTorch DDP |"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  EXPECT_NE(table.find("not in this document"), std::string::npos);  // no NO_SHARD cell here
  // PyTorch DDP's own row: 1.00 against itself; unsharded fsdpp vs single: 64 / 80 = 0.80.
  EXPECT_NE(table.find("| PyTorch DDP | 2 x "), std::string::npos) << table;
  auto line_of = [&](const std::string& label) {
    auto start = table.find("| " + label + " |");
    return table.substr(start, table.find('\n', start) - start);
  };
  EXPECT_NE(line_of("PyTorch DDP").find("| 1.00 |"), std::string::npos) << line_of("PyTorch DDP");
  EXPECT_NE(line_of("fsdpp unsharded").find("| 0.80 |"), std::string::npos) << line_of("fsdpp unsharded");
  // Step time vs unsharded: 105 / 80.
  EXPECT_NE(line_of("fsdpp FULL_SHARD").find("| 1.31 |"), std::string::npos) << line_of("fsdpp FULL_SHARD");
  EXPECT_TRUE(results::has_baseline_cells(doc));
  EXPECT_NE(line_of("PyTorch FSDP2").find("not in this document"), std::string::npos) << line_of("PyTorch FSDP2");
}

TEST_F(DocumentCells, BaselineTableHasAnFsdp2RowAndRatiosAgainstIt) {
  auto with_fsdp2 = outcomes;
  BenchCell fsdp2 = peer_cell(System::PytorchFsdp2, ref(), "fp32", 2, false);
  with_fsdp2.push_back(
      outcome(fsdp2, {peer_repetition({150, 150, 150, 150, 150}), peer_repetition({150, 150, 150, 150, 150})}));
  auto doc = results::new_document({"fsdpp", "bench"}, "smoke");
  doc["cells"] = results_cells(with_fsdp2);
  const std::string table = results::baseline_table(doc);
  EXPECT_NE(table.find("| tokens/s vs PyTorch FSDP2 |"), std::string::npos) << table;
  auto start = table.find("| PyTorch FSDP2 | 2 x ");
  ASSERT_NE(start, std::string::npos) << table;
  EXPECT_NE(table.substr(start, table.find('\n', start) - start).find("| 1.00 |"), std::string::npos) << table;
  // FULL_SHARD tokens/s is the median of tokens/0.600 s and tokens/0.790 s; FSDP2's tokens/0.750 s.
  const double expected = (1 / 0.600 + 1 / 0.790) / 2 * 0.750;
  char text[16];
  std::snprintf(text, sizeof(text), "| %.2f |", expected);
  start = table.find("| fsdpp FULL_SHARD |");
  EXPECT_NE(table.substr(start, table.find('\n', start) - start).find(text), std::string::npos) << text << "\n"
                                                                                                << table;
}

}  // namespace
}  // namespace fsdpp::harness
