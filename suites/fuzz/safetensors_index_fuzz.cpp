// Fuzz target: model.safetensors.index.json of a Hugging Face sharded checkpoint
// (core/io/SAFETENSORS.md, "Sharded checkpoints").
//
// At start-up, write_sharded_safetensors puts two real shards (tensors "a", "b", "c") in a
// scratch folder. Each input is written there as model.safetensors.index.json and read
// with io::load_checkpoint_dir -> SafetensorsIndex::open (core/io/safetensors.cpp); for an
// index it accepts, every listed tensor is looked up, its shard opened and the tensor
// copied out, so the index's weight_map is held against the real shards.
//
// Expected: a std::exception (bad JSON, bad weight_map, a missing shard, a tensor the shard
// lacks). Finding: anything else, or a name from names() that contains() denies.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>

#include "core/io/safetensors.h"
#include "suites/fuzz/fuzz_support.h"

namespace {

namespace fs = std::filesystem;

const fs::path& shards_dir() {
  static const fs::path dir = fsdpp::fuzz::scratch_dir() / "checkpoint";
  return dir;
}

void read_every_tensor(const fsdpp::io::SafetensorsIndex& index) {
  (void)index.total_size();
  (void)index.shard_paths();
  for (const auto& name : index.names()) {
    fsdpp::fuzz::check_invariant(index.contains(name), "names() lists '" + name + "' but contains() denies it");
    fsdpp::fuzz::reader_may_reject([&] {
      (void)index.info(name);
      const at::Tensor t = index.copy_tensor(name);
      (void)t.nbytes();
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  // Shards of at most 40 bytes: "a" (24 bytes) alone, then "b" (32) and "c" (4).
  fsdpp::io::NamedTensors tensors = {{"a", at::arange(6, at::kFloat).reshape({2, 3})},
                                     {"b", at::arange(4, at::kLong)},
                                     {"c", at::ones({2}, at::kBFloat16)}};
  const auto written = fsdpp::io::write_sharded_safetensors(shards_dir(), tensors, 40);
  if (const char* seeds = fsdpp::fuzz::seed_request()) {
    for (const auto& file : written.shard_paths)
      fsdpp::fuzz::write_file(fs::path(seeds) / file.filename(), fsdpp::fuzz::read_file(file));
    fsdpp::fuzz::write_file(fs::path(seeds) / written.index_path->filename(),
                            fsdpp::fuzz::read_file(*written.index_path));
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdpp::fuzz::write_file(shards_dir() / "model.safetensors.index.json",
                          std::string_view(reinterpret_cast<const char*>(data), size));
  fsdpp::fuzz::reader_may_reject([&] { read_every_tensor(fsdpp::io::load_checkpoint_dir(shards_dir())); });
  return 0;
}
