// Running a blocking call that may never return under a deadline.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>

namespace fsdpp::comm {

// Starts `op` on a detached thread; its future holds the value or the exception. The
// thread outlives an abandoned future, so `op` must own (capture by value or shared_ptr)
// everything it uses.
template <class T>
std::future<T> start_detached(std::function<T()> op) {
  auto promise = std::make_shared<std::promise<T>>();
  auto result = promise->get_future();
  std::thread([op = std::move(op), promise] {
    try {
      promise->set_value(op());
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }).detach();
  return result;
}

// Runs `op` (start_detached) and waits up to `deadline` for it. Returns its value, or
// nullopt when the deadline passed first (the thread is left running); an exception from
// `op` is rethrown here. For socket work that a dead or cut-off peer can block far longer
// than a rank may wait: joining a TCPStore, reading the failure board.
template <class T>
std::optional<T> with_deadline(std::function<T()> op, std::chrono::milliseconds deadline) {
  auto result = start_detached(std::move(op));
  if (result.wait_for(deadline) != std::future_status::ready) return std::nullopt;
  return result.get();
}

}  // namespace fsdpp::comm
