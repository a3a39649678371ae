#include "core/train/evaluator.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "core/runtime/progress_line.h"
#include "core/runtime/stopwatch.h"
#include "core/train/train_step.h"

namespace fsdpp::train {

Evaluator::Evaluator(comm::Communicator& comm, const models::CausalLm& lm, const data::TokenDataset& dataset,
                     const EvalOptions& options, at::Device device, TrainLogger& logger)
    : comm_(comm), lm_(lm), dataset_(dataset), options_(options), device_(device), logger_(logger) {}

bool Evaluator::due(int64_t steps_done, int64_t total_steps) const {
  return options_.eval_freq > 0 && steps_done % options_.eval_freq == 0 && steps_done != total_steps;
}

EvalScore Evaluator::run(int64_t steps_done) {
  const auto score = this->score();
  logger_.record({{"kind", "eval"},
                  {"step", steps_done},
                  {"eval_loss", score.loss},
                  {"eval_perplexity", score.perplexity},
                  {"eval_tokens", score.tokens}});
  logger_.print("eval  step %lld | loss %.4f | perplexity %.2f | %lld tokens\n", static_cast<long long>(steps_done),
                score.loss, score.perplexity, static_cast<long long>(score.tokens));
  return score;
}

EvalScore Evaluator::score() {
  torch::NoGradGuard no_grad;
  const int64_t n = comm_.size(), rank = comm_.rank();
  const int64_t seq_len = options_.seq_len, batch_size = options_.batch_size;
  int64_t windows = dataset_.num_windows(seq_len);
  if (options_.max_windows > 0) windows = std::min(windows, options_.max_windows);
  const int64_t per_rank = (windows + n - 1) / n;
  const int64_t batches = (per_rank + batch_size - 1) / batch_size;
  double loss_sum = 0;
  std::optional<runtime::ProgressLine> progress;
  if (rank == 0) progress.emplace("eval", "windows", options_.progress_after_s);
  const auto started = runtime::SteadyClock::now();
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<int64_t> rows;
    for (int64_t j = 0; j < batch_size; ++j) {
      int64_t w = rank + n * (b * batch_size + j);
      if (w < windows) rows.push_back(w);
    }
    const bool idle = rows.empty();
    if (idle) rows.push_back(0);
    auto [inputs, targets] = dataset_.windows(rows, seq_len);
    double s = summed_cross_entropy(lm_, inputs.to(device_), targets.to(device_)).item<double>();
    if (!idle) loss_sum += s;
    if (progress) {  // every rank has scored its first (b + 1) * batch_size windows
      const double seconds = runtime::ms_since(started) / 1000;
      const int64_t done = std::min(windows, (b + 1) * batch_size * n);
      char detail[64];
      std::snprintf(detail, sizeof(detail), "%.0f tokens/s",
                    seconds > 0 ? static_cast<double>(done * seq_len) / seconds : 0.0);
      progress->update(done, windows, seconds, detail);
    }
  }
  progress.reset();
  auto total = torch::tensor({loss_sum}, torch::kDouble);
  comm_.all_reduce(total, comm::ReduceOp::Sum);
  EvalScore score;
  score.tokens = windows * seq_len;
  score.loss = total.item<double>() / static_cast<double>(score.tokens);
  score.perplexity = std::exp(score.loss);
  return score;
}

}  // namespace fsdpp::train
