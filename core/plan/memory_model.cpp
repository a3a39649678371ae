#include "core/plan/memory_model.h"

#include <algorithm>
#include <stdexcept>

#include "core/comm/chunk_plan.h"
#include "core/fsdp/sharding.h"
#include "core/plan/caching_allocator.h"

namespace fsdpp::plan {

namespace {

constexpr int64_t kMasterBytes = 4;  // shards, gradients and AdamW state: fp32
constexpr int64_t kReduceBytes = 4;  // gradient reduction in fp32 (reduce_dtype, as train and the benchmark)

using fsdp::ShardingStrategy;

// Which of model.units (children first, the root last, as ShardedModel creates them) stay
// unsharded from forward to backward: --no-reshard-after-forward's indices count the units
// but the root in module order, the reverse of that. Throws std::invalid_argument naming the
// flag for an index past them or a strategy that never reshards after forward.
std::vector<bool> kept_unsharded(const ModelShape& model, const PlanConfig& c) {
  std::vector<bool> kept(model.units.size(), false);
  if (c.no_reshard_after_forward.empty()) return kept;
  if (!fsdp::reshards_after_forward(c.strategy))
    throw std::invalid_argument("--no-reshard-after-forward: " + fsdp::to_string(c.strategy) +
                                " never reshards after forward (only full_shard and hybrid_shard do)");
  const auto units = static_cast<int64_t>(model.units.size()) - 1;
  for (int64_t index : c.no_reshard_after_forward) {
    const auto i = fsdp::unit_position(index, units);
    if (!i)
      throw std::invalid_argument("--no-reshard-after-forward " + std::to_string(index) + ": the plan's wrap makes " +
                                  std::to_string(units) + " unit(s) besides the root");
    kept[static_cast<size_t>(units - 1 - *i)] = true;
  }
  return kept;
}

// Elements autograd saves per token in one transformer block (compute dtype), by family:
// the inputs of the two norms and of every matmul, the attention's q, k, v and output
// (the flash kernel's; k and v at the query width after GQA's repeat_interleave), and the
// MLP's activation inputs/outputs: GPT-2 saves GELU's input and output (2f), OPT ReLU's
// output, which is also fc2's input (f), Llama gate, SiLU(gate), up and their product (4f).
int64_t block_saved_elements_per_token(const ModelShape& m) {
  const int64_t base = 4 * m.hidden + 5 * m.attention_width;
  if (m.model_type == "gpt2") return base + 2 * m.ffn;
  if (m.model_type == "opt") return base + m.ffn;
  return base + 4 * m.ffn;  // llama, mistral
}

// The attention kernel's log-sum-exp, fp32 per head per token.
int64_t block_saved_fp32_per_token(const ModelShape& m) { return m.heads; }

}  // namespace

int64_t compute_element_size(const std::string& mixed_precision) {
  if (mixed_precision == "fp32") return 4;
  if (mixed_precision == "bf16" || mixed_precision == "fp16") return 2;
  throw std::invalid_argument("--mixed-precision '" + mixed_precision + "': expected fp32, bf16 or fp16");
}

int64_t all_reduce_bytes_sent(int64_t numel, int64_t element_size, int ranks) {
  if (ranks <= 1 || numel == 0) return 0;
  const auto chunks = comm::chunk_byte_counts(numel, ranks, element_size);
  // Phase 1 sends every chunk but its own; phase 2 sends its own chunk to every peer.
  return numel * element_size - chunks[0] + (ranks - 1) * chunks[0];
}

MemoryEstimate estimate_memory(const ModelShape& model, const PlanConfig& c) {
  const int world = c.world_size();
  if (c.nproc < 1 || c.nodes < 1)
    throw std::invalid_argument("--nproc and --nodes must be >= 1, got " + std::to_string(c.nproc) + " and " +
                                std::to_string(c.nodes));
  const int shard = c.shard_group_size();
  if (shard < 1 || world % shard != 0)
    throw std::invalid_argument("--strategy " + fsdp::to_string(c.strategy) + ": a shard group of " +
                                std::to_string(shard) + " ranks does not divide the world of " + std::to_string(world) +
                                " (--nodes " + std::to_string(c.nodes) + " x --nproc " + std::to_string(c.nproc) + ")");
  if (c.seq_len < 1 || c.seq_len > model.max_positions)
    throw std::invalid_argument("--seq-len " + std::to_string(c.seq_len) + ": expected 1 to the model's " +
                                std::to_string(model.max_positions) + " positions");
  const int hpz = c.reshard_after_forward_group_size;
  if (hpz != 0 && !fsdp::reshards_after_forward(c.strategy))
    throw std::invalid_argument("--reshard-after-forward-group-size: " + fsdp::to_string(c.strategy) +
                                " never reshards after forward (only full_shard and hybrid_shard do)");
  if (const auto problem = fsdp::post_forward_group_size_problem(hpz, shard); hpz != 0 && !problem.empty())
    throw std::invalid_argument("--reshard-after-forward-group-size " + std::to_string(hpz) + " " + problem);
  if (c.batch_size < 1) throw std::invalid_argument("--batch-size must be >= 1");
  if (c.grad_accum_steps < 1) throw std::invalid_argument("--grad-accum-steps must be >= 1");
  if (c.ac_freq < 1) throw std::invalid_argument("--ac-freq must be >= 1");
  const int replicas = world / shard;
  const int64_t cbytes = compute_element_size(c.mixed_precision);
  const std::vector<bool> kept = kept_unsharded(model, c);
  const bool mixed = cbytes != kMasterBytes;
  // FsdpUnit: a group of one with no mixed precision and no offload uses the module's own
  // tensors (no flat buffer, no unsharded copy).
  const bool replicated = shard == 1 && !mixed && !c.cpu_offload;

  MemoryEstimate e;
  e.offloaded = c.cpu_offload;
  int64_t shard_numel = 0, largest_block_padded = 0, largest_block_numel = 0, root_numel = 0, all_numel = 0;
  // On CUDA, what the caching allocator counts for the shard buffers (one flat buffer per
  // unit, or the module's own tensors when replicated); host memory counts the bytes.
  const bool cuda_shards = c.device.name != "cpu" && !c.cpu_offload;
  int64_t shard_allocated = 0;
  CollectiveBytes& comm = e.comm;
  const int64_t micro = c.grad_accum_steps;
  int64_t kept_numel = 0;
  int64_t post_forward_numel = 0;  // the pieces of --reshard-after-forward-group-size, padded
  for (size_t u = 0; u < model.units.size(); ++u) {
    const auto& unit = model.units[u];
    int64_t unit_shard = 0, unit_pad = 0;
    for (const auto& p : unit.params) {
      auto layout = fsdp::ShardLayout::of(p.shape, shard);
      unit_shard += replicated ? p.numel() : layout.shard_numel();
      if (!replicated) unit_pad += (layout.shard_rows - layout.valid_rows(0)) * layout.row_numel;
    }
    shard_numel += unit_shard;
    if (!cuda_shards) {
      shard_allocated += unit_shard * kMasterBytes;
    } else if (!replicated) {
      shard_allocated += cuda_allocated_bytes(unit_shard * kMasterBytes);
    } else {
      for (const auto& p : unit.params) shard_allocated += cuda_allocated_bytes(p.numel() * kMasterBytes);
    }
    e.padding_bytes += unit_pad * kMasterBytes;
    all_numel += unit.numel();
    if (kept[u]) kept_numel += unit.numel();
    if (unit.is_root) {
      root_numel = unit.numel();
    } else {
      largest_block_numel = std::max(largest_block_numel, unit.numel());
      largest_block_padded = std::max(largest_block_padded, unit_shard * shard);
    }
    // Collectives (core/fsdp/fsdp_collectives.h, grad_reducer.h): the all-gather and
    // reduce-scatter move the padded flat shard over the shard group; FULL_SHARD gathers a
    // non-root unit again for backward (the root stays unsharded, as FSDP2's).
    if (c.strategy == ShardingStrategy::NoShard) {
      // A replicated unit's flat gradient is padded to a multiple of the replicas
      // (grad_reducer.cpp, replica_reduce_input); a flat shard's is not.
      const int64_t flat = replicated ? (unit.numel() + replicas - 1) / replicas * replicas : unit_shard;
      comm.all_reduce += micro * all_reduce_bytes_sent(flat, kReduceBytes, replicas);
      continue;
    }
    if (shard > 1) {
      const bool regathers = fsdp::reshards_after_forward(c.strategy) && !unit.is_root && !kept[u];
      comm.all_gather += micro * (shard - 1) * unit_shard * cbytes;  // forward
      if (regathers && hpz > 0) {
        // Backward: the piece (S/K rank chunks) to the K - 1 others of the post-forward group.
        comm.all_gather += micro * (hpz - 1) * (shard / hpz) * unit_shard * cbytes;
        post_forward_numel += (shard / hpz) * unit_shard;
      } else if (regathers) {
        comm.all_gather += micro * (shard - 1) * unit_shard * cbytes;
      }
      comm.reduce_scatter += micro * (shard - 1) * unit_shard * kReduceBytes;
    }
    if (replicas > 1) comm.all_reduce += micro * all_reduce_bytes_sent(unit_shard, kReduceBytes, replicas);
  }
  // The global gradient norm (core/fsdp/grad_norm.cpp): one double all-reduced over the
  // shard group, once per optimizer step.
  comm.all_reduce += all_reduce_bytes_sent(1, 8, shard);

  e.param_shard_bytes = shard_numel * kMasterBytes;
  e.grad_shard_bytes = shard_numel * kMasterBytes;
  e.optimizer_state_bytes = 2 * shard_numel * kMasterBytes;
  e.fp32_master_extra_bytes = 0;
  const int64_t persistent = e.param_shard_bytes + e.optimizer_state_bytes;  // between steps: gradients are cleared
  // On the CPU the host is the device: offloaded state stays in the memory the peak counts
  // (the benchmark's counting CPU allocator sees every CPU tensor).
  const bool state_on_device = !c.cpu_offload || c.device.name == "cpu";
  e.device_persistent_after_setup = state_on_device ? shard_allocated : 0;
  e.host_persistent_bytes = c.cpu_offload ? persistent + e.grad_shard_bytes : 0;
  const int64_t device_state = state_on_device ? persistent : 0;

  // Unsharded parameters in the compute dtype. Replicated units have none besides the
  // module's own tensors (counted as shards).
  e.prefetch_depth = c.prefetch ? 2 : 1;
  e.unsharded_unit_bytes = replicated ? 0 : largest_block_numel * cbytes;
  e.unsharded_root_bytes = replicated ? 0 : root_numel * cbytes;
  const bool keeps_all = !fsdp::reshards_after_forward(c.strategy);  // SHARD_GRAD_OP, NO_SHARD, hybrid zero2
  e.unsharded_in_flight_bytes =
      replicated ? 0
                 : (keeps_all ? all_numel * cbytes
                              : e.unsharded_root_bytes + kept_numel * cbytes + post_forward_numel * cbytes);
  e.all_gather_buffer_bytes =
      replicated || shard == 1 ? 0 : (largest_block_padded / shard + largest_block_padded) * cbytes;
  // The reduce-scatter's input and output; on the CPU, Gloo's receive buffer of the input's
  // size too (core/comm/gloo_backend.cpp), alive while the collective runs. A shard group
  // of one runs no collective: its input is the output (core/fsdp/grad_reducer.cpp).
  const int64_t receive_buffer = c.device.name == "cpu" && shard > 1 ? largest_block_padded * kReduceBytes : 0;
  const int64_t output_numel = shard > 1 ? largest_block_padded / shard : 0;
  e.reduce_scatter_buffer_bytes =
      replicated ? 0 : (largest_block_padded + output_numel) * kReduceBytes + receive_buffer;

  // Activations of one micro-batch on this rank.
  const int64_t tokens = c.batch_size * c.seq_len;
  const int64_t block_bytes =
      tokens * (block_saved_elements_per_token(model) * cbytes + block_saved_fp32_per_token(model) * 4);
  const int64_t root_bytes = tokens * 2 * model.hidden * cbytes;  // final norm's and the LM head's inputs
  const int64_t checkpointed = c.activation_checkpointing ? model.layers / c.ac_freq : 0;
  const int64_t block_input = tokens * model.hidden * cbytes;
  e.activation_bytes_without_ac = model.layers * block_bytes + root_bytes;
  const int64_t ac_layers = model.layers / std::max(1, c.ac_freq);
  e.activation_bytes_with_ac = (model.layers - ac_layers) * block_bytes + ac_layers * block_input + root_bytes;
  e.activation_bytes = c.activation_checkpointing ? e.activation_bytes_with_ac : e.activation_bytes_without_ac;
  e.recompute_bytes = checkpointed > 0 ? block_bytes : 0;
  // The loss (core/train/train_step.cpp). The composite (logits.to(fp32), cross_entropy):
  // at log_softmax's backward its saved fp32 output, the incoming fp32 gradient and the
  // outgoing one are alive together, 12 bytes per logit. The fused kernel: the saved
  // logits and their gradient, both in the compute dtype.
  e.logits_bytes = tokens * model.vocab * (c.fused_cross_entropy ? 2 * cbytes : 12);

  // Gradients of earlier micro-batches are held during later ones.
  const int64_t held_grads = !state_on_device || micro == 1 ? 0 : e.grad_shard_bytes;
  e.peak_at_loss = device_state + held_grads + e.activation_bytes + e.logits_bytes + e.unsharded_in_flight_bytes;
  // Backward, block by block from the last (k = 0: its backward runs first, with every
  // activation alive) to the first. At the k-th: the state; the gradient shards folded so
  // far, k - 1 blocks' (ShardedModel's post_backward folds the previous unit's reduction
  // when it issues the next: one in flight, whose buffers count from k = 1); the
  // activations of the blocks not yet run backward; the unsharded blocks (the running one
  // and the prefetched ones, or all of them where nothing reshards after forward); the
  // running block's unsharded gradients; the root's gradients (the root is reduced last,
  // in the final callback); the recomputed block; the activation gradient flowing
  // (2 x block input); earlier micro-batches' gradients. The largest is the phase's peak.
  const bool grads_on_device = state_on_device;
  const int64_t block_grad_shard =
      replicated ? largest_block_numel * kMasterBytes : largest_block_padded / std::max(1, shard) * kMasterBytes;
  const int64_t running_grads = replicated ? largest_block_numel * kMasterBytes : e.unsharded_unit_bytes;
  const int64_t root_grads = replicated ? root_numel * kMasterBytes : e.unsharded_root_bytes;
  const int64_t blocks_unsharded =
      keeps_all ? e.unsharded_in_flight_bytes : e.unsharded_in_flight_bytes + e.prefetch_depth * e.unsharded_unit_bytes;
  const int64_t layers = std::max<int64_t>(1, model.layers);
  const int64_t block_activations = (e.activation_bytes - root_bytes) / layers;
  for (int64_t k = 0; k < layers; ++k) {
    // A replicated unit's gradients are the module's own, kept from the moment they are
    // computed; its reduction works on a flat copy.
    const int64_t folded_blocks = replicated ? k : std::max<int64_t>(0, k - 1);
    const int64_t folded = grads_on_device ? folded_blocks * block_grad_shard : 0;
    const int64_t in_flight = k == 0 ? 0 : replicated ? block_grad_shard : e.reduce_scatter_buffer_bytes;
    const int64_t unsharded = keeps_all ? blocks_unsharded - k * e.unsharded_unit_bytes : blocks_unsharded;
    const int64_t at_k = device_state + held_grads + folded + in_flight + e.activation_bytes - k * block_activations +
                         unsharded + running_grads + root_grads + e.recompute_bytes + 2 * block_input;
    e.peak_in_backward = std::max(e.peak_in_backward, at_k);
  }
  const int64_t all_grads_on_device = grads_on_device ? e.grad_shard_bytes : 0;
  e.peak_at_optimizer = device_state + all_grads_on_device;
  e.peak_bytes = std::max({e.peak_at_loss, e.peak_in_backward, e.peak_at_optimizer});
  e.peak_phase = e.peak_bytes == e.peak_at_loss       ? "loss"
                 : e.peak_bytes == e.peak_in_backward ? "backward"
                                                      : "optimizer";
  return e;
}

}  // namespace fsdpp::plan
