// The benchmark matrix: which cells `fsdpp bench` can run, their ids, and the presets.
//
// A cell is one system training one model shape in one configuration:
//   fsdpp          an FSDP strategy (full_shard, shard_grad_op, no_shard, hybrid_shard,
//                  hybrid_shard_zero2) on N ranks, or "unsharded": the plain model in one
//                  process (no FSDP), the baseline of overhead_vs_unsharded;
//   pytorch_single torch_peer.py --mode single, one process;
//   pytorch_ddp    torch_peer.py --mode ddp on N ranks (gloo on the CPU);
//   pytorch_fsdp2  torch_peer.py --mode fsdp2 (CUDA, or the CPU over Gloo with PyTorch >= 2.6).
// Dimensions: strategy x mixed precision (fp32, bf16, fp16) x world size x model shape x
// prefetch x activation checkpointing x CPU offload x deterministic. Prefetch, offload and
// deterministic do not apply to the PyTorch peers; prefetch and offload not to "unsharded".
//
// Ids (stable across runs: the key the regression gate and the dashboard match on):
//   <model>/fsdp-<strategy>/<mp>/n<N>/pf<0|1>-ac<0|1>-off<0|1>-det<0|1>
//   <model>/unsharded/<mp>/n1-gb<G>/ac<0|1>-det<0|1>
//   <model>/pytorch_single/<mp>/n1-gb<G>/ac<0|1>
//   <model>/pytorch_ddp/<mp>/n<N>/ac<0|1>        <model>/pytorch_fsdp2/<mp>/n<N>/ac<0|1>
// where <model> is "<type>-<size>" (e.g. gpt2-mini256) and G the global batch.
//
// Global batch: a multi-rank cell trains batch_per_rank sequences on each of N ranks; the
// single-process cells it is compared with (unsharded, pytorch_single) train the whole
// global batch N * batch_per_rank in one forward/backward, with all cores. So
// overhead_vs_unsharded compares the same work per optimizer step on the same machine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdpp::harness {

// A model of the matrix: a from-scratch preset (models/presets) with its batch shape and
// how many steps a repetition warms up and times.
struct ModelShape {
  std::string model_type;  // "gpt2"
  std::string size;        // "mini256"
  int64_t vocab_size = 0;
  int64_t seq_len = 0;
  int64_t batch_per_rank = 0;
  int warmup_steps = 2;
  int timed_steps = 5;
  // Tells two shapes of one preset size apart ("s1024": the GPU shape of gpt2 124M, whose
  // CPU shape trains 256-token sequences); empty for the CPU shapes.
  std::string variant;

  // "gpt2-mini256", "llama-1B-s2048"
  std::string name() const { return model_type + "-" + size + (variant.empty() ? "" : "-" + variant); }
};

// The CPU shapes, smallest first: tiny, mini, mini256 (the CPU reference: 4 layers,
// d=256, vocab 8192, seq 128, batch 8 per rank), 124M, 355M.
const std::vector<ModelShape>& model_shapes();
// The GPU shapes (issue 9's benchmark): gpt2-124M-s1024 (batch 8 x 1024 tokens per rank)
// and llama-1B-s2048 (Llama 3.2 1B, batch 4 x 2048), 3 warm-up and 10 timed steps.
const std::vector<ModelShape>& gpu_model_shapes();
// The CPU shapes of the families whose PyTorch peer is transformers' own model class
// (torch_peer.py: Qwen3ForCausalLM, MixtralForCausalLM): qwen3-mini and mixtral-mini
// (models/presets.h: 4 layers of width 128; Mixtral's 8 experts, 2 per token), vocab 8192,
// seq 128, batch 4 per rank, 2 warm-up and 10 timed steps.
const std::vector<ModelShape>& family_model_shapes();
// A CPU, GPU or family shape by name. Throws std::invalid_argument naming `name` and listing the
// known ones.
const ModelShape& model_shape(const std::string& name);

enum class System { Fsdpp, PytorchSingle, PytorchDdp, PytorchFsdp2 };
const char* to_string(System system);  // "fsdpp", "pytorch_single", ...

struct BenchCell {
  System system = System::Fsdpp;
  ModelShape model;
  // fsdpp: an FSDP strategy name or "unsharded"; peers: "single", "ddp", "fsdp2".
  std::string strategy = "full_shard";
  std::string mixed_precision = "fp32";  // fp32, bf16, fp16
  int world_size = 1;
  int64_t batch_per_rank = 0;
  bool prefetch = true;
  bool activation_checkpointing = false;
  bool cpu_offload = false;
  bool deterministic = false;

  int64_t global_batch() const { return batch_per_rank * world_size; }
  bool is_unsharded() const { return system == System::Fsdpp && strategy == "unsharded"; }
  std::string id() const;
};

// Constructors that fill the fields a kind of cell does not use consistently (a multi-rank
// cell takes the shape's batch per rank; a single-process one the given global batch).
BenchCell fsdp_cell(const ModelShape& model, const std::string& strategy, const std::string& mp, int world_size,
                    bool prefetch, bool ac, bool offload, bool deterministic);
BenchCell unsharded_cell(const ModelShape& model, const std::string& mp, int64_t global_batch, bool ac,
                         bool deterministic);
BenchCell peer_cell(System system, const ModelShape& model, const std::string& mp, int world_size, bool ac);
// pytorch_single on the whole global batch.
BenchCell single_peer_cell(const ModelShape& model, const std::string& mp, int64_t global_batch, bool ac);

// The unsharded cell an FSDP cell is measured against: same model, global batch, mixed
// precision, activation checkpointing and determinism. None for cells that are not FSDP.
std::optional<BenchCell> unsharded_baseline(const BenchCell& cell);
// Whether `peer` (pytorch_ddp / _fsdp2 / _single) is the comparison for fsdpp cell `cell`:
// same model and mixed precision and activation checkpointing; pytorch_ddp and
// pytorch_fsdp2: an FSDP cell (not unsharded) of the same world size and batch per rank;
// pytorch_single: same global batch.
bool peer_matches(const BenchCell& peer, const BenchCell& cell);

// Presets, each a named list of cells with unique ids:
//   smoke  ~5 minutes on 2 quiet CPU cores (CI): the cells of the README baseline table
//          (harness/results/baseline_table.h): the reference model (gpt2-mini256) fp32 at
//          N=2 with full_shard and no_shard, its unsharded baseline, pytorch_single,
//          pytorch_ddp N=2, and pytorch_fsdp2 N=2; gpt2-tiny at N=2 with bf16, fp16,
//          activation checkpointing, CPU offload, prefetch off, deterministic,
//          shard_grad_op, and hybrid_shard / hybrid_shard_zero2 at N=4 (2 x 2); every
//          baseline those need. Every cell of smoke is also a cell of full.
//   full   the product of every dimension over tiny, mini, mini256, 124M and 355M at
//          N in {1, 2, 4}, less the combinations that are the same run or no run: at N=1
//          only full_shard (every strategy is the same computation without peers); the
//          hybrid strategies only at N=4 (a 2 x 2 mesh; at N=2 one mesh dimension would
//          be 1). Plus the unsharded baseline of every FSDP cell and pytorch_ddp /
//          pytorch_fsdp2 (N > 1) and pytorch_single for every model, N, precision and AC.
//          Hours to days on a CPU; slice it with --filter.
//   gpu    the GPU benchmark (`--device cuda`): the GPU shapes, bf16 compute (fp32 masters
//          and reduction), full_shard at N in {1, 2, 4, 8}, with and without activation
//          checkpointing, each beside pytorch_fsdp2 on the same N; at N=1 also the
//          unsharded baseline and pytorch_single. Cells needing more GPUs than the
//          machine has are unavailable (cell_run.h). No unsharded baseline at N > 1: one
//          GPU does not hold N ranks' batch of a 1B model (overhead_vs_unsharded is null
//          there).
//   families  the other families beside transformers' own model (~3 minutes on 2 CPU
//          cores): for each family shape, full_shard fp32 at N=2 followed by pytorch_fsdp2
//          at N=2 (the peer runs transformers' Qwen3ForCausalLM / MixtralForCausalLM from
//          fsdpp's initial weights on fsdpp's batches; its Python needs transformers), and
//          the unsharded baseline. Not part of smoke or full: their cells, and the gate's
//          history of them, stay as they were.
// Throws std::invalid_argument naming an unknown preset and listing the known ones.
std::vector<BenchCell> preset_cells(const std::string& preset);
const std::vector<std::string>& preset_names();

// The cells whose id matches `regex` (ECMAScript, searched anywhere in the id, as
// --benchmark_filter), in order. An empty regex selects all. Throws std::invalid_argument
// for a malformed regex, naming it.
std::vector<BenchCell> filter_cells(const std::vector<BenchCell>& cells, const std::string& regex);
// `cells` followed by the unsharded baselines they need and do not contain, once each.
std::vector<BenchCell> with_baselines(const std::vector<BenchCell>& cells);
// What `fsdpp bench --preset P --filter R` runs: the cells of `preset` whose id matches
// `regex` (filter_cells), followed by the preset's unsharded baselines of them that the
// regex left out, once each. A baseline the preset lacks (the gpu preset at N > 1) is not
// added. Throws as filter_cells.
std::vector<BenchCell> select_cells(const std::vector<BenchCell>& preset, const std::string& regex);

}  // namespace fsdpp::harness
