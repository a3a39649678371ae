// Asynchronous saving (CHECKPOINT.md, "Asynchronous save"): save() stages a host copy of
// this rank's content and returns; a background thread then writes and commits it with
// save_checkpoint, over a communicator of its own, while training goes on. The files, the
// index and the commit protocol are those of a synchronous save, so a save that dies half
// way is a torn temporary folder that readers skip, as after any crash.
//
// Same semantics as torch.distributed.checkpoint.async_save (torchtitan's async mode):
// one save in flight at a time, the next save waits for it, and a failed save is
// rethrown at the next save() or wait(). The save's collectives run on the saver's own
// group (a subgroup of every world rank), so they never interleave with training's.
//
// Thread-safety: call save(), poll() and wait() from one thread (the training loop).
// Memory: the saver holds one copy of the rank's content in host memory, kept between saves
// for the saver's life (host_staging.h): pinned (page-locked) for rows on a CUDA device, so
// the device-to-host copies run at full PCIe speed; reused while the tensors keep their
// shapes and dtypes (torchtitan's async_with_pinned_mem).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_writer.h"
#include "core/checkpoint/host_staging.h"
#include "core/comm/communicator.h"

namespace fsdpp::checkpoint {

// A save that finished, as poll() reports it.
struct FinishedSave {
  std::filesystem::path dir;
  std::optional<SavedCheckpoint> saved;  // set when it committed
  std::string error;                     // set when it failed (rethrown by save()/wait())
  double stage_ms = 0;                   // save(): copying the content to host memory
  double total_ms = 0;                   // from save() to the commit (or the failure)
  int64_t staged_bytes = 0;              // save(): the rows copied to host memory
  bool staged_pinned = false;            // save(): rows came from a CUDA device, copied to pinned memory
  int64_t staging_allocated_bytes = 0;   // save(): host buffers allocated (0: the last save's reused)
};

class AsyncCheckpointSaver {
 public:
  // Collective over `world`: creates the saver's group ("<world>/<group_name>"; the name
  // must be unique in the world).
  AsyncCheckpointSaver(comm::Communicator& world, const std::string& group_name = "async-checkpoint");
  // Waits for a pending save (its error, if any, is dropped: call wait() to see it).
  // While an exception unwinds, it aborts the saver's group and waits at most a few
  // seconds: the temporary folder then stays behind, as after a crash.
  ~AsyncCheckpointSaver();
  AsyncCheckpointSaver(const AsyncCheckpointSaver&) = delete;
  AsyncCheckpointSaver& operator=(const AsyncCheckpointSaver&) = delete;

  // Every rank, in the same order: waits for the previous save (rethrowing its failure),
  // copies `content`'s rows to host memory (from any device), and starts the background
  // write of `dir` (arguments as save_checkpoint's). Returns once the copy is made (CUDA:
  // the copies, queued on the rows' current stream, have completed): the caller may then
  // change the tensors. options.on_point runs on the background thread.
  void save(const std::filesystem::path& dir, const CheckpointContent& content, const nlohmann::json& train_state,
            SaveOptions options = {});

  // Never blocks: the outcome of the save that finished since the last poll() or wait(),
  // else none. Each outcome is returned once, by poll() or by wait(); a failure is also
  // kept, and rethrown by the next save() or wait().
  std::optional<FinishedSave> poll();

  // Blocks until the pending save finished. Throws a failure not rethrown yet (the same
  // line on every rank); else returns the outcome poll() has not returned (or none).
  std::optional<FinishedSave> wait();

  bool pending() const;

  // The host buffers the last save() staged into, in its tensor order (host_staging.h):
  // for tests and telemetry (is_pinned, data_ptr); never write into them.
  std::vector<at::Tensor> staging_buffers() const;

  struct Job;

 private:
  void join_finished();
  std::shared_ptr<comm::Communicator> group_;
  HostStaging staging_;                   // written by save() only while no save is in flight
  std::shared_ptr<Job> job_;              // the save in flight or finished, not yet waited for
  std::optional<FinishedSave> finished_;  // joined, not yet returned by poll() or wait()
  std::string error_;                     // a failure not yet rethrown
};

}  // namespace fsdpp::checkpoint
