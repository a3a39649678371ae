#include "harness/cli/bench_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "core/io/atomic_file.h"
#include "core/models/causal_lm.h"
#include "harness/bench/bench_progress.h"
#include "harness/bench/cell_result.h"
#include "harness/bench/matrix.h"
#include "harness/results/baseline_table.h"
#include "harness/results/results_document.h"

namespace fsdpp::cli {

void BenchCommand::add_to(CLI::App& app) {
  command_ =
      app.add_subcommand("bench-step", "Time whole training steps of one model/strategy cell (tokens/s, MFU, memory)");
  add_distributed_flags(*command_, dist_);
  auto& c = config_;
  command_->add_option("--model-type", c.model_type, "A from-scratch family (as fsdpp train --model-type)")
      ->check(CLI::IsMember(models::supported_model_types()));
  command_->add_option("--model-size", c.model_size, "A from-scratch preset size of that family (e.g. 124M, 1B)");
  command_->add_option("--vocab-size", c.vocab_size, "Override the preset's vocabulary (0: keep)")
      ->check(CLI::NonNegativeNumber);
  command_->add_option("--batch-size", c.batch_size, "Sequences per rank per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command_->add_option("--seq-len", c.seq_len, "Tokens per sequence")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  command_->add_option("--warmup", c.warmup_steps, "Untimed steps first")->check(CLI::Range(0, 1000));
  command_->add_option("--steps", c.steps, "Timed steps")->check(CLI::Range(1, 100000));
  command_->add_option("--device", c.device, "cpu, cuda or cuda:N (default: cuda where there is a GPU, else cpu)");
  command_->add_option("--data", c.data,
                       "Train on this token data as fsdpp train --data does (its sampler, shuffled with --seed); "
                       "default: one fixed random batch per rank");
  command_
      ->add_option("--mixed-precision", c.mixed_precision,
                   "Compute dtype: fp32 (default, as train), bf16 or fp16 (fp32 masters and reduce; fp16 with "
                   "dynamic loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  command_->add_option("--strategy", strategy_,
                       "full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2, or unsharded "
                       "(the plain model without FSDP, one rank)");
  command_
      ->add_option("--hybrid-shard-size", c.hybrid_shard_size, "Hybrid strategies: ranks per shard group (0: default)")
      ->check(CLI::Range(0, 1024));
  command_->add_flag("--activation-checkpointing", c.activation_checkpointing, "Checkpoint every transformer block");
  command_->add_flag("--cpu-offload", c.cpu_offload, "Shards, gradients and optimizer state in host memory");
  command_->add_flag("--no-prefetch", no_prefetch_, "Disable forward and backward prefetching");
  command_->add_flag("--deterministic", c.deterministic,
                     "Deterministic kernels only (train's --deterministic also folds gradients in a world-size "
                     "invariant order)");
  command_
      ->add_option("--inject-delay-pct", c.inject_delay_pct,
                   "Sleep this % of each step's duration inside the timed region (tests regression gates)")
      ->check(CLI::Range(0.0, 10000.0));
  command_->add_option("--seed", c.seed, "Initial weights and data");
  command_->add_flag("--eager-rms-norm", c.eager_rms_norm,
                     "Llama on CUDA: RMSNorm op by op (HF's formula) instead of PyTorch's fused kernel");
  command_->add_flag("--full-recompute", c.full_recompute,
                     "With --activation-checkpointing: recompute each block's last projection too (an A/B)");
  command_->add_flag("--per-tensor-adamw", c.per_tensor_adamw,
                     "AdamW with torch::optim::AdamW's per-tensor step instead of the fused kernels");
  command_->add_flag("--no-count-cpu-tensors", no_count_cpu_tensors_,
                     "CPU: record only the resident set, not tensor bytes through the counting allocator "
                     "(to measure its overhead)");
  command_->add_option("--out", out_, "Write the cell's JSON here (rank 0)");
  command_->add_option("--profile-trace", c.profile_trace,
                       "Rank 0 records the timed steps with PyTorch's profiler into this Chrome trace "
                       "(slows them; read it with `fsdpp results profile`)");

  matrix_command_ = app.add_subcommand(
      "bench", "Run the benchmark matrix (a preset of cells, Google Benchmark underneath) into a results document");
  auto& m = matrix_;
  matrix_command_
      ->add_option("--preset", preset_,
                   "smoke (CI, minutes), full (the whole product; hours), gpu (with --device cuda) or families "
                   "(Qwen3 and Mixtral beside transformers' own models under FSDP2)")
      ->check(CLI::IsMember(harness::preset_names()));
  matrix_command_->add_option("--filter", filter_, "Only the cells whose id matches this regex (their baselines too)");
  matrix_command_->add_option("--out", matrix_out_, "Write the fsdpp.results document here");
  auto* history =
      matrix_command_->add_option("--history", history_, "Also append the document to this history directory");
  matrix_command_
      ->add_option("--profile-dir", m.setup.profile_dir,
                   "Every cell's rank 0 (fsdpp and PyTorch) also writes a profiler trace here, "
                   "<cell id with / as __>.trace.json (profiled steps are slower: not for the history)")
      ->excludes(history);
  matrix_command_->add_option("--device", m.setup.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  matrix_command_
      ->add_option("--inject-delay-pct", m.setup.inject_delay_pct,
                   "fsdpp cells sleep this % of each step's duration inside the timed region")
      ->check(CLI::Range(0.0, 10000.0));
  matrix_command_->add_option("--repetitions", m.repetitions, "Launches per cell (each warms up, then times its steps)")
      ->check(CLI::Range(1, 1000));
  matrix_command_->add_option("--budget-s", m.setup.budget_s, "Wall-clock limit of one repetition of one cell, seconds")
      ->check(CLI::Range(1.0, 1e7));
  matrix_command_->add_flag("--no-bind-cores", no_bind_cores_,
                            "CPU: let ranks' threads float over all cores (default: each rank pinned to its own)");
  matrix_command_->add_option("--python", m.setup.python, "Interpreter with torch and numpy for the PyTorch peers");
  matrix_command_->add_option("--peer-script", m.setup.peer_script, "torch_peer.py (default: the source tree's)");
  matrix_command_->add_flag("--resume", resume_,
                            "Continue the interrupted run of this same command recorded in <out>.progress.json "
                            "(rewritten after every cell; removed once --out is written): its finished cells are "
                            "kept, the rest run. Without that file the run starts from the beginning");
  matrix_command_->add_flag("--list", list_, "Print the selected cells' ids and exit");
  matrix_command_->add_option("--table", table_, "Print the README baseline table of this results document and exit");
}

bool BenchCommand::parsed() const {
  return (command_ != nullptr && command_->parsed()) || (matrix_command_ != nullptr && matrix_command_->parsed());
}

void BenchCommand::check() {
  if (command_ != nullptr && command_->parsed()) {
    if (strategy_ != "unsharded") fsdp::parse_strategy(strategy_);  // throws naming the value
    return;
  }
  if (!table_.empty()) return;
  if (preset_.empty()) throw std::invalid_argument("bench: --preset is required (or --table FILE)");
  if (harness::select_cells(harness::preset_cells(preset_), filter_).empty())
    throw std::invalid_argument("bench: --filter '" + filter_ + "' selects no cell of --preset " + preset_);
  if (!list_ && matrix_out_.empty()) throw std::invalid_argument("bench: --out FILE is required");
}

int BenchCommand::run(const std::vector<std::string>& argv) {
  if (command_ != nullptr && command_->parsed()) return run_step(argv);
  if (matrix_command_ != nullptr && matrix_command_->parsed()) return run_matrix(argv);
  return -1;
}

int BenchCommand::run_step(const std::vector<std::string>& argv) {
  config_.unsharded = strategy_ == "unsharded";
  if (!config_.unsharded) config_.strategy = fsdp::parse_strategy(strategy_);
  config_.prefetch = !no_prefetch_;
  config_.count_cpu_tensors = !no_count_cpu_tensors_;
  return run_distributed(argv, dist_, [&](comm::Communicator& comm, const comm::WorldSpec& world) {
    auto cell = harness::run_step_bench(comm, world.local_rank, config_);
    if (comm.rank() == 0) {
      // MFU named by its denominator: the matmul timed in this run, and the datasheet peak
      // (torchtitan's) where the record has one.
      char datasheet_mfu[64] = "";
      if (const auto it = cell.find("mfu_datasheet"); it != cell.end() && it->is_number())
        std::snprintf(datasheet_mfu, sizeof datasheet_mfu, ", MFU %.1f%% vs datasheet peak", 100 * it->get<double>());
      std::printf(
          "bench-step: %s %s, %s, %d ranks, %s%s: %.1f ms/step (median), %.0f tokens/s, MFU %.1f%% vs timed "
          "matmul%s, peak %.2f GB\n",
          config_.model_type.c_str(), config_.model_size.c_str(), strategy_.c_str(), comm.size(),
          config_.mixed_precision.c_str(), config_.activation_checkpointing ? ", AC" : "",
          cell["step_ms_median"].get<double>(), cell["tokens_per_s"].get<double>(), 100 * cell["mfu"].get<double>(),
          datasheet_mfu,
          static_cast<double>(
              cell["memory_bytes"].value("peak_allocated", cell["memory_bytes"].value("rss_peak", int64_t{0}))) /
              1e9);
      std::fflush(stdout);
      if (!out_.empty()) io::write_file_atomic(out_, cell.dump(2) + "\n");
    }
    return 0;
  });
}

int BenchCommand::run_matrix(const std::vector<std::string>& argv) {
  if (!table_.empty()) {
    std::fputs(results::baseline_table(results::load_results(table_)).c_str(), stdout);
    return 0;
  }
  auto cells = harness::select_cells(harness::preset_cells(preset_), filter_);  // check(): not empty
  if (list_) {
    for (const auto& c : cells) std::printf("%s\n", c.id().c_str());
    return 0;
  }
  matrix_.setup.bind_cores = !no_bind_cores_;

  // The parent only launches commands: it never computes with LibTorch itself.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> command{"fsdpp"};  // as given, less --resume: what a rerun must repeat
  for (size_t i = 1; i < argv.size(); ++i)
    if (argv[i] != "--resume") command.push_back(argv[i]);
  auto doc = results::new_document(command, preset_);
  const auto progress_path = harness::BenchProgress::path_for(matrix_out_);
  const bool interrupted = std::filesystem::exists(progress_path);
  auto progress = resume_ && interrupted ? harness::BenchProgress::resume(progress_path, doc)
                                         : harness::BenchProgress(progress_path, doc);
  if (resume_ && interrupted) {
    doc.update(progress.header());  // the same run: its run id, start time, commit and machine
    matrix_.finished = progress.finished(cells);
    std::fprintf(stderr, "bench: resuming %s: %zu of %zu cells settled before\n", progress_path.c_str(),
                 matrix_.finished.size(), cells.size());
  } else if (interrupted) {
    std::fprintf(stderr, "bench: %s (an interrupted run) will be replaced: --resume continues it\n",
                 progress_path.c_str());
  }
  matrix_.on_cell_settled = [&progress](const harness::CellOutcome& o) { progress.record(o); };
  auto outcomes = harness::run_matrix(cells, matrix_);
  doc["cells"] = harness::results_cells(outcomes);
  results::write_results(matrix_out_, doc);
  progress.remove();
  std::string where = matrix_out_;
  if (!history_.empty()) where += " and " + results::append_to_history(history_, doc).string();

  int ok = 0, unavailable = 0, failed = 0;
  for (const auto& o : outcomes) (o.status == "ok" ? ok : o.status == "unavailable" ? unavailable : failed)++;
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (results::has_baseline_cells(doc)) std::printf("\n%s\n", results::baseline_table(doc).c_str());
  for (const auto& o : outcomes)
    if (o.status == "failed") std::fprintf(stderr, "bench: FAILED %s: %s\n", o.cell.id().c_str(), o.reason.c_str());
  std::printf("bench: %zu cells (%d ok, %d unavailable, %d failed) in %.0f s; wrote %s\n", outcomes.size(), ok,
              unavailable, failed, wall_s, where.c_str());
  std::fflush(stdout);
  return failed > 0 ? 1 : 0;
}

}  // namespace fsdpp::cli
