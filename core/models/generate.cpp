#include "core/models/generate.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace fsdpp::models {

torch::Tensor filter_logits(const torch::Tensor& logits, int64_t top_k, double top_p) {
  auto out = logits.clone();
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (top_k > 0 && top_k < out.size(0)) {
    auto kth = std::get<0>(out.topk(top_k)).min();
    out.masked_fill_(out < kth, neg_inf);
  }
  if (top_p < 1.0) {
    auto sorted = out.sort(/*dim=*/0, /*descending=*/true);
    auto probs = torch::softmax(std::get<0>(sorted).to(torch::kDouble), 0);
    // Drop a token when the tokens ranked before it already reach top_p.
    auto before = probs.cumsum(0) - probs;
    auto drop = before >= top_p;
    out.index_put_({std::get<1>(sorted).masked_select(drop)}, neg_inf);
  }
  return out;
}

std::vector<int64_t> generate(const CausalLm& lm, std::vector<int64_t> prompt, const SamplingOptions& o) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt has no tokens");
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(o.seed);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(prompt.size()) - lm.max_positions);
    auto context = torch::tensor(std::vector<int64_t>(prompt.begin() + start, prompt.end()), torch::kLong).unsqueeze(0);
    auto logits = lm.logits(context)[0][-1].to(torch::kFloat);
    int64_t next;
    if (o.temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto filtered = filter_logits(logits / o.temperature, o.top_k, o.top_p);
      next = torch::multinomial(torch::softmax(filtered, 0), 1, false, gen).item<int64_t>();
    }
    prompt.push_back(next);
  }
  return prompt;
}

EvalResult evaluate(const CausalLm& lm, const torch::Tensor& tokens, int64_t seq_len, int64_t batch_size,
                    bool keep_logits, const std::function<void(int64_t, int64_t)>& progress) {
  if (seq_len < 1) throw std::invalid_argument("eval: --seq-len must be >= 1");
  if (seq_len > lm.max_positions)
    throw std::invalid_argument("eval: --seq-len " + std::to_string(seq_len) + " exceeds the model's " +
                                std::to_string(lm.max_positions) + " positions");
  const int64_t windows = (tokens.numel() - 1) / seq_len;
  if (windows < 1)
    throw std::invalid_argument("eval: " + std::to_string(tokens.numel()) + " tokens do not fill one window of " +
                                std::to_string(seq_len + 1));
  torch::NoGradGuard no_grad;
  auto flat = tokens.to(torch::kLong).reshape({-1});
  double total = 0;
  std::vector<torch::Tensor> kept_inputs, kept_logits;
  for (int64_t first = 0; first < windows; first += batch_size) {
    int64_t count = std::min(batch_size, windows - first);
    std::vector<torch::Tensor> inputs, targets;
    for (int64_t i = first; i < first + count; ++i) {
      inputs.push_back(flat.narrow(0, i * seq_len, seq_len));
      targets.push_back(flat.narrow(0, i * seq_len + 1, seq_len));
    }
    auto logits = lm.logits(torch::stack(inputs)).to(torch::kFloat);
    if (keep_logits) {
      kept_inputs.push_back(torch::stack(inputs).cpu());
      kept_logits.push_back(logits.cpu());
    }
    total +=
        torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), torch::stack(targets).reshape({-1}),
                                             torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    if (progress) progress(first + count, windows);
  }
  EvalResult r;
  r.tokens = windows * seq_len;
  r.loss = total / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.loss);
  if (keep_logits) {
    r.input_ids = torch::cat(kept_inputs);
    r.logits = torch::cat(kept_logits);
  }
  return r;
}

}  // namespace fsdpp::models
