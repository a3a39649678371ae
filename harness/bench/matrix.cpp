#include "harness/bench/matrix.h"

#include <regex>
#include <set>
#include <stdexcept>

namespace fsdpp::harness {

namespace {

std::string bit(bool b) { return b ? "1" : "0"; }

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

const std::vector<std::string>& fsdp_strategies() {
  static const std::vector<std::string> names = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard",
                                                 "hybrid_shard_zero2"};
  return names;
}

const std::vector<std::string>& precisions() {
  static const std::vector<std::string> names = {"fp32", "bf16", "fp16"};
  return names;
}

bool is_hybrid(const std::string& strategy) { return strategy.rfind("hybrid", 0) == 0; }

// The README table's cells (see harness/results/baseline_table.h).
std::vector<BenchCell> table_cells() {
  const auto& ref = model_shape("gpt2-mini256");
  const int n = 2;
  return {fsdp_cell(ref, "full_shard", "fp32", n, true, false, false, false),
          fsdp_cell(ref, "no_shard", "fp32", n, true, false, false, false),
          unsharded_cell(ref, "fp32", n * ref.batch_per_rank, false, false),
          single_peer_cell(ref, "fp32", n * ref.batch_per_rank, false),
          peer_cell(System::PytorchDdp, ref, "fp32", n, false),
          peer_cell(System::PytorchFsdp2, ref, "fp32", n, false)};
}

std::vector<BenchCell> smoke_cells() {
  auto cells = table_cells();
  const auto& tiny = model_shape("gpt2-tiny");
  auto fs = [&](const std::string& mp, bool pf, bool ac, bool off, bool det) {
    return fsdp_cell(tiny, "full_shard", mp, 2, pf, ac, off, det);
  };
  cells.push_back(fs("fp32", true, false, false, false));
  cells.push_back(fs("bf16", true, false, false, false));
  cells.push_back(fs("fp16", true, false, false, false));
  cells.push_back(fs("fp32", true, true, false, false));    // activation checkpointing
  cells.push_back(fs("fp32", true, false, true, false));    // CPU offload
  cells.push_back(fs("fp32", false, false, false, false));  // prefetch off
  cells.push_back(fs("fp32", true, false, false, true));    // deterministic
  cells.push_back(fsdp_cell(tiny, "shard_grad_op", "fp32", 2, true, false, false, false));
  cells.push_back(fsdp_cell(tiny, "hybrid_shard", "fp32", 4, true, false, false, false));
  cells.push_back(fsdp_cell(tiny, "hybrid_shard_zero2", "fp32", 4, true, false, false, false));
  return with_baselines(cells);
}

std::vector<BenchCell> full_cells() {
  std::vector<BenchCell> cells;
  const std::vector<int> world_sizes = {1, 2, 4};
  for (const auto& model : model_shapes()) {
    for (int n : world_sizes) {
      for (const auto& strategy : fsdp_strategies()) {
        if (n == 1 && strategy != "full_shard") continue;
        if (is_hybrid(strategy) && n != 4) continue;
        for (const auto& mp : precisions())
          for (bool pf : {true, false})
            for (bool ac : {false, true})
              for (bool off : {false, true})
                for (bool det : {false, true}) cells.push_back(fsdp_cell(model, strategy, mp, n, pf, ac, off, det));
      }
      for (const auto& mp : precisions()) {
        for (bool ac : {false, true}) {
          cells.push_back(single_peer_cell(model, mp, n * model.batch_per_rank, ac));
          if (n > 1) {
            cells.push_back(peer_cell(System::PytorchDdp, model, mp, n, ac));
            cells.push_back(peer_cell(System::PytorchFsdp2, model, mp, n, ac));
          }
        }
      }
    }
  }
  return with_baselines(cells);
}

std::vector<BenchCell> gpu_cells() {
  std::vector<BenchCell> cells;
  for (const auto& model : gpu_model_shapes()) {
    for (int n : {1, 2, 4, 8}) {
      for (bool ac : {false, true}) {
        // fsdpp and its peer next to each other, so that drift over the run hits both.
        cells.push_back(fsdp_cell(model, "full_shard", "bf16", n, true, ac, false, false));
        cells.push_back(peer_cell(System::PytorchFsdp2, model, "bf16", n, ac));
        if (n == 1) {
          cells.push_back(unsharded_cell(model, "bf16", model.batch_per_rank, ac, false));
          cells.push_back(single_peer_cell(model, "bf16", model.batch_per_rank, ac));
        }
      }
    }
  }
  return cells;
}

std::vector<BenchCell> family_cells() {
  std::vector<BenchCell> cells;
  for (const auto& model : family_model_shapes()) {
    // fsdpp and its peer next to each other, so that drift over the run hits both.
    cells.push_back(fsdp_cell(model, "full_shard", "fp32", 2, true, false, false, false));
    cells.push_back(peer_cell(System::PytorchFsdp2, model, "fp32", 2, false));
  }
  return with_baselines(cells);
}

}  // namespace

const std::vector<ModelShape>& family_model_shapes() {
  static const std::vector<ModelShape> shapes = {
      {"qwen3", "mini", 8192, 128, 4, 2, 10, ""},
      {"mixtral", "mini", 8192, 128, 4, 2, 10, ""},
  };
  return shapes;
}

const std::vector<ModelShape>& gpu_model_shapes() {
  static const std::vector<ModelShape> shapes = {
      {"gpt2", "124M", 50257, 1024, 8, 3, 10, "s1024"},
      {"llama", "1B", 128256, 2048, 4, 3, 10, "s2048"},
  };
  return shapes;
}

const std::vector<ModelShape>& model_shapes() {
  // vocab, seq_len, batch per rank, warm-up and timed steps: small enough that a CPU cell
  // of the larger models still takes minutes, not hours. tiny's steps are short and vary
  // one to the next (Gloo over loopback): it times 20, so that a run's median over 3 x 20
  // steps is about half as uncertain as over 3 x 5 (figures:
  // docs/notes/2026-11-28-comments-moved.md).
  static const std::vector<ModelShape> shapes = {
      {"gpt2", "tiny", 2048, 64, 4, 3, 20, ""},    {"gpt2", "mini", 8192, 128, 8, 2, 5, ""},
      {"gpt2", "mini256", 8192, 128, 8, 2, 5, ""}, {"gpt2", "124M", 50257, 256, 4, 1, 3, ""},
      {"gpt2", "355M", 50257, 256, 2, 1, 3, ""},
  };
  return shapes;
}

const ModelShape& model_shape(const std::string& name) {
  std::vector<std::string> names;
  for (const auto* shapes : {&model_shapes(), &gpu_model_shapes(), &family_model_shapes()}) {
    for (const auto& s : *shapes) {
      if (s.name() == name) return s;
      names.push_back(s.name());
    }
  }
  throw std::invalid_argument("benchmark model '" + name + "': expected one of " + join(names));
}

const char* to_string(System system) {
  switch (system) {
    case System::Fsdpp: return "fsdpp";
    case System::PytorchSingle: return "pytorch_single";
    case System::PytorchDdp: return "pytorch_ddp";
    case System::PytorchFsdp2: return "pytorch_fsdp2";
  }
  return "?";
}

std::string BenchCell::id() const {
  std::string head = model.name() + "/";
  const std::string n = "n" + std::to_string(world_size);
  const std::string gb = "n1-gb" + std::to_string(global_batch());
  switch (system) {
    case System::Fsdpp:
      if (is_unsharded())
        return head + "unsharded/" + mixed_precision + "/" + gb + "/ac" + bit(activation_checkpointing) + "-det" +
               bit(deterministic);
      return head + "fsdp-" + strategy + "/" + mixed_precision + "/" + n + "/pf" + bit(prefetch) + "-ac" +
             bit(activation_checkpointing) + "-off" + bit(cpu_offload) + "-det" + bit(deterministic);
    case System::PytorchSingle:
      return head + "pytorch_single/" + mixed_precision + "/" + gb + "/ac" + bit(activation_checkpointing);
    case System::PytorchDdp:
    case System::PytorchFsdp2:
      return head + to_string(system) + "/" + mixed_precision + "/" + n + "/ac" + bit(activation_checkpointing);
  }
  return head;
}

BenchCell fsdp_cell(const ModelShape& model, const std::string& strategy, const std::string& mp, int world_size,
                    bool prefetch, bool ac, bool offload, bool deterministic) {
  BenchCell c;
  c.system = System::Fsdpp;
  c.model = model;
  c.strategy = strategy;
  c.mixed_precision = mp;
  c.world_size = world_size;
  c.batch_per_rank = model.batch_per_rank;
  c.prefetch = prefetch;
  c.activation_checkpointing = ac;
  c.cpu_offload = offload;
  c.deterministic = deterministic;
  return c;
}

BenchCell unsharded_cell(const ModelShape& model, const std::string& mp, int64_t global_batch, bool ac,
                         bool deterministic) {
  BenchCell c = fsdp_cell(model, "unsharded", mp, 1, false, ac, false, deterministic);
  c.batch_per_rank = global_batch;
  return c;
}

BenchCell peer_cell(System system, const ModelShape& model, const std::string& mp, int world_size, bool ac) {
  if (system == System::Fsdpp) throw std::invalid_argument("peer_cell: fsdpp is not a peer");
  BenchCell c = fsdp_cell(model, "", mp, world_size, false, ac, false, false);
  c.system = system;
  c.strategy = system == System::PytorchSingle ? "single" : system == System::PytorchDdp ? "ddp" : "fsdp2";
  return c;
}

BenchCell single_peer_cell(const ModelShape& model, const std::string& mp, int64_t global_batch, bool ac) {
  BenchCell c = peer_cell(System::PytorchSingle, model, mp, 1, ac);
  c.batch_per_rank = global_batch;
  return c;
}

std::optional<BenchCell> unsharded_baseline(const BenchCell& cell) {
  if (cell.system != System::Fsdpp || cell.is_unsharded()) return std::nullopt;
  return unsharded_cell(cell.model, cell.mixed_precision, cell.global_batch(), cell.activation_checkpointing,
                        cell.deterministic);
}

bool peer_matches(const BenchCell& peer, const BenchCell& cell) {
  if (cell.system != System::Fsdpp) return false;
  if (peer.model.name() != cell.model.name() || peer.mixed_precision != cell.mixed_precision ||
      peer.activation_checkpointing != cell.activation_checkpointing)
    return false;
  if (peer.system == System::PytorchDdp || peer.system == System::PytorchFsdp2)
    return !cell.is_unsharded() && peer.world_size == cell.world_size && peer.batch_per_rank == cell.batch_per_rank;
  if (peer.system == System::PytorchSingle) return peer.global_batch() == cell.global_batch();
  return false;
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"smoke", "full", "gpu", "families"};
  return names;
}

std::vector<BenchCell> preset_cells(const std::string& preset) {
  if (preset == "smoke") return smoke_cells();
  if (preset == "full") return full_cells();
  if (preset == "gpu") return gpu_cells();
  if (preset == "families") return family_cells();
  throw std::invalid_argument("--preset '" + preset + "': expected one of " + join(preset_names()));
}

std::vector<BenchCell> filter_cells(const std::vector<BenchCell>& cells, const std::string& regex) {
  if (regex.empty()) return cells;
  std::regex re;
  try {
    re = std::regex(regex, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument("--filter '" + regex + "': not a valid regular expression (" + e.what() + ")");
  }
  std::vector<BenchCell> out;
  for (const auto& c : cells)
    if (std::regex_search(c.id(), re)) out.push_back(c);
  return out;
}

std::vector<BenchCell> with_baselines(const std::vector<BenchCell>& cells) {
  std::vector<BenchCell> out = cells;
  std::set<std::string> ids;
  for (const auto& c : cells) ids.insert(c.id());
  for (const auto& c : cells) {
    auto base = unsharded_baseline(c);
    if (base && ids.insert(base->id()).second) out.push_back(*base);
  }
  return out;
}

std::vector<BenchCell> select_cells(const std::vector<BenchCell>& preset, const std::string& regex) {
  std::vector<BenchCell> out = filter_cells(preset, regex);
  std::set<std::string> ids;
  for (const auto& c : out) ids.insert(c.id());
  const size_t selected = out.size();
  for (size_t i = 0; i < selected; ++i) {
    auto base = unsharded_baseline(out[i]);
    if (!base || ids.count(base->id())) continue;
    for (const auto& c : preset) {
      if (c.id() != base->id()) continue;
      out.push_back(c);
      ids.insert(c.id());
      break;
    }
  }
  return out;
}

}  // namespace fsdpp::harness
