#include "harness/bench/cell_run.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "core/compat/torch_compat.h"
#include "core/io/atomic_file.h"
#include "core/models/causal_lm.h"
#include "core/models/hf_checkpoint.h"
#include "core/models/presets.h"
#include "core/runtime/capabilities.h"
#include "core/runtime/device.h"
#include "core/runtime/threads.h"
#include "harness/launch/launcher.h"
#include "harness/testing/temp_dir.h"

#ifndef FSDPP_PEER_SCRIPT
#define FSDPP_PEER_SCRIPT "harness/peers/torch_peer.py"
#endif
#ifndef FSDPP_PEER_PYTHON
#define FSDPP_PEER_PYTHON "python3"
#endif

namespace fsdpp::harness {

namespace {

std::string shell_quote(const std::string& arg) {
  std::string out = "'";
  for (char ch : arg) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string last_lines(const std::string& text, size_t lines) {
  size_t pos = text.size();
  while (pos > 0 && text[pos - 1] == '\n') --pos;
  size_t end = pos;
  for (size_t seen = 0; pos > 0; --pos) {
    if (text[pos - 1] == '\n' && ++seen == lines) break;
  }
  return text.substr(pos, end - pos);
}

// Whether `python` imports `modules` ("torch, numpy"): nullopt if so, else why not. Asked
// once per interpreter and list.
std::optional<std::string> python_problem(const std::string& python, const std::string& modules) {
  static std::mutex mu;
  static std::map<std::string, std::optional<std::string>> known;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = python + "\n" + modules;
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  auto [code, output] = run_shell(shell_quote(python) + " -c " + shell_quote("import " + modules));
  std::optional<std::string> problem;
  if (code != 0) {
    std::string detail = last_lines(output, 1);
    std::string named = modules;
    if (const auto comma = named.rfind(", "); comma != std::string::npos) named.replace(comma, 2, " and ");
    problem = "no Python with " + named + " at " + python + (detail.empty() ? "" : " (" + detail + ")") +
              "; bash ci/setup.sh installs one into .venv";
  }
  known[key] = problem;
  return problem;
}

// The peer's own models are GPT-2 and Llama-shaped (llama, mistral); every other family
// trains transformers' model class (harness/peers/README.md).
bool peer_uses_transformers(const std::string& model_type) {
  return model_type != "gpt2" && model_type != "llama" && model_type != "mistral";
}

std::string peer_python(const CellRunSetup& setup) {
  return setup.python.empty() ? std::string(FSDPP_PEER_PYTHON) : setup.python;
}

std::string peer_script(const CellRunSetup& setup) {
  return setup.peer_script.empty() ? std::string(FSDPP_PEER_SCRIPT) : setup.peer_script;
}

std::string peer_mode(System system) {
  switch (system) {
    case System::PytorchSingle: return "single";
    case System::PytorchDdp: return "ddp";
    case System::PytorchFsdp2: return "fsdp2";
    case System::Fsdpp: break;
  }
  throw std::logic_error("peer_mode: fsdpp is not a peer");
}

}  // namespace

nlohmann::json read_json_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file.string() + ": cannot read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(file.string() + ": not JSON: " + e.what());
  }
}

double RepetitionResult::seconds() const {
  double sum_ms = 0;
  for (double ms : step_ms) sum_ms += ms;
  return sum_ms / 1e3;
}

int threads_per_rank(const BenchCell& cell, const CellRunSetup& setup) {
  int cores = setup.cores > 0 ? setup.cores : runtime::available_cores();
  int threads = std::max(1, cores / std::max(1, cell.world_size));
  // Host threads feed a GPU; more than a few only contend (harness/peers/README.md).
  if (setup.device == "cuda") threads = std::min(threads, 4);
  return threads;
}

std::optional<std::string> unavailable_reason(const BenchCell& cell, const CellRunSetup& setup) {
  if (setup.device == "cuda") {
    const int gpus = setup.gpus >= 0 ? setup.gpus : runtime::cuda_device_count();
    if (cell.world_size > gpus)
      return "needs " + std::to_string(cell.world_size) + (cell.world_size == 1 ? " GPU" : " GPUs") +
             ", one per rank; this machine has " + std::to_string(gpus);
  }
  if (cell.system == System::Fsdpp) {
    if (cell.mixed_precision == "fp16" && setup.device == "cpu" && !runtime::cpu_has_fp16_kernels())
      return std::string("LibTorch ") + compat::torch_version_string() +
             " has no fp16 CPU kernels (matmul and LayerNorm are \"not implemented for 'Half'\"); fp16 runs on CUDA";
    return std::nullopt;
  }
  if (cell.mixed_precision == "fp16")
    return "torch_peer.py trains in fp32 or bf16 (autocast, or FSDP2's bf16 parameters); it has no fp16 mode";
  return python_problem(peer_python(setup),
                        peer_uses_transformers(cell.model.model_type) ? "torch, numpy, transformers" : "torch, numpy");
}

bool binds_cores(const CellRunSetup& setup) { return setup.bind_cores && setup.device == "cpu"; }

std::string profile_trace_name(const BenchCell& cell) {
  std::string name;
  for (char c : cell.id()) name += (c == '/') ? std::string("__") : std::string(1, c);
  return name + ".trace.json";
}

namespace {

// Both systems take the same flag (bench-step and torch_peer.py --profile-trace).
void append_profile_flag(std::vector<std::string>& argv, const BenchCell& cell, const CellRunSetup& setup) {
  if (setup.profile_dir.empty()) return;
  argv.emplace_back("--profile-trace");
  argv.emplace_back((std::filesystem::path(setup.profile_dir) / profile_trace_name(cell)).string());
}

// Both systems take the cell's shape with the same flags: per-rank batch, window, warmup
// and timed steps.
void append_shape_flags(std::vector<std::string>& argv, const BenchCell& cell) {
  const auto& m = cell.model;
  argv.insert(argv.end(), {"--batch-size", std::to_string(cell.batch_per_rank), "--seq-len", std::to_string(m.seq_len),
                           "--warmup", std::to_string(m.warmup_steps), "--steps", std::to_string(m.timed_steps)});
}

}  // namespace

bool peer_shares_fsdpp_init(const BenchCell& cell, const CellRunSetup& setup) {
  return cell.system != System::Fsdpp && setup.device == "cpu";
}

std::vector<std::string> cell_command(const BenchCell& cell, const CellRunSetup& setup,
                                      const std::filesystem::path& record_file,
                                      const std::filesystem::path& model_config_file) {
  const std::string n = std::to_string(cell.world_size), threads = std::to_string(threads_per_rank(cell, setup));
  const auto& m = cell.model;
  std::vector<std::string> argv;
  if (cell.system == System::Fsdpp) {
    argv = {setup.fsdpp_binary.empty() ? self_executable() : setup.fsdpp_binary,
            "bench-step",
            "--nproc",
            n,
            "--threads",
            threads,
            "--budget-s",
            number(setup.budget_s),
            "--timeout-s",
            "600",
            "--model-type",
            m.model_type,
            "--model-size",
            m.size,
            "--vocab-size",
            std::to_string(m.vocab_size)};
    append_shape_flags(argv, cell);
    argv.insert(argv.end(),
                {"--device", setup.device, "--mixed-precision", cell.mixed_precision, "--strategy", cell.strategy,
                 "--inject-delay-pct", number(setup.inject_delay_pct), "--seed", "0", "--out", record_file.string()});
    if (cell.activation_checkpointing) argv.emplace_back("--activation-checkpointing");
    if (cell.cpu_offload) argv.emplace_back("--cpu-offload");
    if (!cell.prefetch && !cell.is_unsharded()) argv.emplace_back("--no-prefetch");
    if (cell.deterministic) argv.emplace_back("--deterministic");
    if (binds_cores(setup)) argv.emplace_back("--bind-cores");
    append_profile_flag(argv, cell, setup);
    return argv;
  }
  // The single-process peer has no launcher to bind it: its OpenMP threads are bound by
  // the environment it starts with, as fsdpp's launcher sets for its ranks.
  if (binds_cores(setup) && cell.system == System::PytorchSingle)
    argv = {"env", "OMP_PROC_BIND=close", "OMP_PLACES=threads"};
  argv.insert(argv.end(), {peer_python(setup), peer_script(setup), "--mode", peer_mode(cell.system)});
  if (cell.system != System::PytorchSingle) {
    argv.insert(argv.end(), {"--nproc", n, "--budget-s", number(setup.budget_s)});
    if (binds_cores(setup)) argv.emplace_back("--bind-cores");
  }
  argv.insert(argv.end(), {"--model-config", model_config_file.string()});
  append_shape_flags(argv, cell);
  argv.insert(argv.end(), {"--lr", "3e-4", "--lr-schedule", "constant", "--weight-decay", "0.1", "--grad-clip", "1.0",
                           "--mixed-precision", cell.mixed_precision, "--threads", threads, "--device", setup.device,
                           "--seed", "0", "--matmul-peak", "--out", record_file.string()});
  if (cell.activation_checkpointing) argv.emplace_back("--activation-checkpointing");
  if (peer_shares_fsdpp_init(cell, setup))
    argv.insert(argv.end(), {"--weights", (model_config_file.parent_path() / "init").string(), "--fixed-batch"});
  // Each system steps AdamW with its fastest implementation on the device. On CUDA both
  // run PyTorch's fused kernel (fsdpp: FusedAdamW, core/optim/fused_adamw.h; PyTorch:
  // AdamW(fused=True), torchtitan's default), so the comparison is of the sharding. On the
  // CPU fsdpp runs its own fused host kernel (core/optim/adamw_kernel.h); PyTorch 1.13 has
  // no fused CPU AdamW (it came in 2.4), so the peer runs its next best, the foreach step.
  argv.insert(argv.end(), {"--adam-impl", setup.device == "cuda" ? "fused" : "foreach"});
  append_profile_flag(argv, cell, setup);
  return argv;
}

RepetitionResult run_cell_once(const BenchCell& cell, const CellRunSetup& setup,
                               const std::filesystem::path& work_dir) {
  const auto record_file = work_dir / "record.json", config_file = work_dir / "config.json";
  std::filesystem::remove(record_file);
  if (cell.system != System::Fsdpp) {
    const auto config = models::from_scratch_config(cell.model.model_type, cell.model.size, cell.model.vocab_size);
    io::write_file_atomic(config_file, config.dump(2) + "\n");
    if (peer_shares_fsdpp_init(cell, setup)) {
      // bench-step's --seed 0 init: init_from_scratch is what its seeded rows compute.
      auto lm = models::build_causal_lm(config, cell.model.model_type + " " + cell.model.size);
      models::init_from_scratch(lm, 0);
      models::save_pretrained(lm, work_dir / "init");
    }
  }
  std::string command;
  for (const auto& arg : cell_command(cell, setup, record_file, config_file))
    command += (command.empty() ? "" : " ") + shell_quote(arg);
  // The launchers bound their ranks by --budget-s; `timeout` bounds the launcher itself
  // (and pytorch_single, which has no launcher), a little later.
  const int limit_s = static_cast<int>(std::ceil(setup.budget_s)) + 60;
  auto [code, output] = run_shell("timeout -k 10 " + std::to_string(limit_s) + " " + command);
  if (code == 3 && cell.system == System::PytorchFsdp2 && std::filesystem::exists(record_file)) {
    auto record = read_json_file(record_file);
    throw CellUnavailable(record.value("reason", std::string("torch_peer.py: fsdp2 not available")));
  }
  if (code != 0)
    throw std::runtime_error(cell.id() + ": exit status " + std::to_string(code) +
                             (code == 124 ? " (over the budget of " + number(setup.budget_s) + " s)" : "") + ": " +
                             command + "\n" + last_lines(output, 15));
  RepetitionResult result;
  result.record = read_json_file(record_file);
  if (!result.record.contains("step_ms") || !result.record["step_ms"].is_array())
    throw std::runtime_error(cell.id() + ": " + record_file.string() + " has no step_ms");
  result.step_ms = result.record["step_ms"].get<std::vector<double>>();
  if (static_cast<int>(result.step_ms.size()) != cell.model.timed_steps)
    throw std::runtime_error(cell.id() + ": " + std::to_string(result.step_ms.size()) + " timed steps, expected " +
                             std::to_string(cell.model.timed_steps));
  return result;
}

}  // namespace fsdpp::harness
