// The tolerance policy, per dtype. Floating results are compared like
// torch.testing.assert_close: |actual - expected| <= atol + rtol * |expected|, with
// PyTorch's default rtol/atol for the dtype:
//   fp64 1e-7 / 1e-7, fp32 1.3e-6 / 1e-5 (near round-off), fp16 1e-3 / 1e-5,
//   bf16 1.6e-2 / 1e-5 (bf16 keeps 8 mantissa bits: one rounding is 2^-8 = 3.9e-3
//   relative, so a few roundings fit in 1.6e-2). Integers and bool are exact.
// A suite may ask for exactness (bitwise) where the design promises it.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace fsdpp::harness {

struct Tolerance {
  double rtol = 0;
  double atol = 0;
};

Tolerance default_tolerance(at::ScalarType dtype);

struct Comparison {
  bool ok = false;
  double max_abs_error = 0;
  double max_rel_error = 0;  // |a - e| / |e| over elements with e != 0
  int64_t mismatches = 0;
  std::string describe() const;
};

// Compares elementwise (after flattening); shapes must have equal numel, dtypes equal.
Comparison compare(const at::Tensor& actual, const at::Tensor& expected, Tolerance tol);
inline Comparison compare(const at::Tensor& actual, const at::Tensor& expected) {
  return compare(actual, expected, default_tolerance(expected.scalar_type()));
}
bool bitwise_equal(const at::Tensor& a, const at::Tensor& b);

// The float64 judge (the rule of harness/references/hf_models.py's judge_logits): `truth` is
// a computation in float64, `peer` the same formulas carried out in `actual`'s precision
// (the error that precision itself makes on these inputs). `actual` passes when it is within
// its dtype's policy of `truth`; or else when all three hold: its largest error is at most
// kJudgeFactor times `peer`'s, no more of its elements fall outside the policy than
// `peer`'s, and its largest error is at most kJudgeCap. Two correct implementations round
// differently, so neither is closer to the exact answer in general; a wrong formula is many
// times the precision's own error.
inline constexpr double kJudgeFactor = 2.0;
inline constexpr double kJudgeCap = 1e-4;

struct Judgement {
  bool ok = false;
  Comparison actual;  // against truth, in actual's policy
  Comparison peer;    // the same, for peer
  std::string describe() const;
};

Judgement judge_against_float64(const at::Tensor& actual, const at::Tensor& truth, const at::Tensor& peer);

}  // namespace fsdpp::harness
