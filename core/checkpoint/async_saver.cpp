#include "core/checkpoint/async_saver.h"

#include <ATen/ATen.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <utility>

#include "core/runtime/stopwatch.h"

namespace fsdpp::checkpoint {

namespace {

using Clock = runtime::SteadyClock;
using runtime::ms_since;

}  // namespace

struct AsyncCheckpointSaver::Job {
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // under mu
  FinishedSave outcome;

  bool is_done() {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
};

AsyncCheckpointSaver::AsyncCheckpointSaver(comm::Communicator& world, const std::string& group_name) {
  std::vector<int> everyone(world.size());
  std::iota(everyone.begin(), everyone.end(), 0);
  group_ = world.subgroup(everyone, group_name);
}

AsyncCheckpointSaver::~AsyncCheckpointSaver() {
  if (!job_) return;
  if (std::uncaught_exceptions() > 0) {
    // The training loop failed; a peer may be gone, and the save's collectives would wait
    // for it up to the timeout. Give the save a moment, then leave it (the thread owns
    // everything it touches) and let the process exit: what it leaves is a torn save.
    group_->abort("the training loop failed while a checkpoint was being saved");
    std::unique_lock<std::mutex> lock(job_->mu);
    if (job_->cv.wait_for(lock, std::chrono::seconds(5), [&] { return job_->done; })) {
      lock.unlock();
      job_->thread.join();
    } else {
      lock.unlock();
      job_->thread.detach();
    }
    return;
  }
  job_->thread.join();
}

void AsyncCheckpointSaver::save(const std::filesystem::path& dir, const CheckpointContent& content,
                                const nlohmann::json& train_state, SaveOptions options) {
  // The buffers are reused: the previous save's writer thread reads them until it ends, and
  // wait() joins it (or throws its failure, after joining) before anything is staged.
  wait();
  const auto start = Clock::now();
  auto job = std::make_shared<Job>();
  job->outcome.dir = dir;
  StagedContent staging = staging_.stage(content);
  job->outcome.stage_ms = ms_since(start);
  job->outcome.staged_bytes = staging.bytes;
  job->outcome.staged_pinned = staging.pinned;
  job->outcome.staging_allocated_bytes = staging.allocated_bytes;
  CheckpointContent staged = std::move(staging.content);
  job->thread = std::thread(
      [job, group = group_, dir, staged = std::move(staged), train_state, options = std::move(options), start]() {
        std::optional<SavedCheckpoint> saved;
        std::string error;
        try {
          saved = save_checkpoint(*group, dir, staged, train_state, options);
        } catch (const std::exception& e) {
          error = e.what();
        } catch (...) {
          error = "save_checkpoint " + dir.string() + ": unknown failure";
        }
        std::lock_guard<std::mutex> lock(job->mu);
        job->outcome.saved = std::move(saved);
        job->outcome.error = std::move(error);
        job->outcome.total_ms = ms_since(start);
        job->done = true;
        job->cv.notify_all();
      });
  job_ = std::move(job);
}

void AsyncCheckpointSaver::join_finished() {
  job_->thread.join();
  finished_ = std::move(job_->outcome);
  if (!finished_->error.empty()) error_ = finished_->error;
  job_.reset();
}

std::optional<FinishedSave> AsyncCheckpointSaver::poll() {
  if (job_ && job_->is_done()) join_finished();
  std::optional<FinishedSave> out = std::move(finished_);
  finished_.reset();
  return out;
}

std::optional<FinishedSave> AsyncCheckpointSaver::wait() {
  if (job_) join_finished();
  std::optional<FinishedSave> out = std::move(finished_);
  finished_.reset();
  if (!error_.empty()) {
    const std::string error = std::move(error_);
    error_.clear();
    throw std::runtime_error(error);
  }
  return out;
}

bool AsyncCheckpointSaver::pending() const { return job_ != nullptr && !job_->is_done(); }

std::vector<at::Tensor> AsyncCheckpointSaver::staging_buffers() const { return staging_.buffers(); }

}  // namespace fsdpp::checkpoint
