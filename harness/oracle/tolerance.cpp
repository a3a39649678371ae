#include "harness/oracle/tolerance.h"

#include <ATen/ATen.h>

#include <sstream>

namespace fsdpp::harness {

Tolerance default_tolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble: return {1e-7, 1e-7};
    case at::kFloat: return {1.3e-6, 1e-5};
    case at::kHalf: return {1e-3, 1e-5};
    case at::kBFloat16: return {1.6e-2, 1e-5};
    default: return {0, 0};
  }
}

std::string Comparison::describe() const {
  std::ostringstream os;
  os << (ok ? "ok" : "MISMATCH") << " (max abs err " << max_abs_error << ", max rel err " << max_rel_error << ", "
     << mismatches << " elements outside tolerance)";
  return os.str();
}

Comparison compare(const at::Tensor& actual, const at::Tensor& expected, Tolerance tol) {
  Comparison c;
  if (actual.numel() != expected.numel() || actual.scalar_type() != expected.scalar_type()) {
    c.mismatches = -1;
    return c;
  }
  if (actual.numel() == 0) {
    c.ok = true;
    return c;
  }
  auto a = actual.reshape({-1}).to(at::kDouble);
  auto e = expected.reshape({-1}).to(at::kDouble);
  auto diff = (a - e).abs();
  auto bound = tol.atol + tol.rtol * e.abs();
  // NaN never matches (assert_close's default equal_nan=False).
  auto bad = diff.gt(bound).logical_or(diff.isnan());
  c.mismatches = bad.sum().item<int64_t>();
  c.max_abs_error = diff.max().item<double>();
  auto nonzero = e.ne(0);
  if (nonzero.any().item<bool>())
    c.max_rel_error = (diff.masked_select(nonzero) / e.abs().masked_select(nonzero)).max().item<double>();
  c.ok = c.mismatches == 0;
  return c;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.numel() != b.numel()) return false;
  auto x = a.contiguous().reshape({-1}).view(at::kByte);
  auto y = b.contiguous().reshape({-1}).view(at::kByte);
  return at::equal(x, y);
}

Judgement judge_against_float64(const at::Tensor& actual, const at::Tensor& truth, const at::Tensor& peer) {
  TORCH_CHECK(truth.scalar_type() == at::kDouble, "judge_against_float64: the truth is ", truth.scalar_type());
  TORCH_CHECK(peer.scalar_type() == actual.scalar_type(), "judge_against_float64: the peer is ", peer.scalar_type(),
              ", actual ", actual.scalar_type());
  const auto policy = default_tolerance(actual.scalar_type());
  Judgement j;
  j.actual = compare(actual.to(at::kDouble), truth, policy);
  j.peer = compare(peer.to(at::kDouble), truth, policy);
  j.ok = j.actual.mismatches >= 0 &&
         (j.actual.ok || (j.actual.max_abs_error <= kJudgeFactor * j.peer.max_abs_error &&
                          j.actual.mismatches <= j.peer.mismatches && j.actual.max_abs_error <= kJudgeCap));
  return j;
}

std::string Judgement::describe() const {
  std::ostringstream os;
  os << (ok ? "ok" : "FAIL") << ": against float64, actual " << actual.describe() << "; the same formulas in "
     << "its precision " << peer.describe() << " (bar: within the policy, or at most " << kJudgeFactor
     << "x the peer's error, no more elements outside, and at most " << kJudgeCap << ")";
  return os.str();
}

}  // namespace fsdpp::harness
