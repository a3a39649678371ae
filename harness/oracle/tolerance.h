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

}  // namespace fsdpp::harness
