// Compiled with -O3 -ffp-contract=off -fno-math-errno (core/CMakeLists.txt): no FMA
// contraction, and sqrt as the single correctly rounded instruction.
#include "core/optim/adamw_kernel.h"

#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace fsdpp::optim {

namespace {

// One element, in torch::optim::AdamW's order of operations.
inline void step_one(float& p, float g, float& m, float& v, const AdamWStepConstants& c) {
  float param = p * c.decay;
  const float exp_avg = m * c.beta1 + c.one_minus_beta1 * g;
  const float exp_avg_sq = v * c.beta2 + c.one_minus_beta2 * g * g;
  const float denom = std::sqrt(exp_avg_sq) / c.sqrt_bias_correction2 + c.eps;
  param = param + c.neg_step_size * exp_avg / denom;
  p = param;
  m = exp_avg;
  v = exp_avg_sq;
}

void step_generic(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStepConstants& c) {
  for (int64_t i = 0; i < n; ++i) step_one(p[i], g[i], m[i], v[i], c);
}

#if defined(__x86_64__)
bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// The same operations as step_one, eight lanes at a time; the tail goes through step_one.
__attribute__((target("avx2"))) void step_avx2(float* p, const float* g, float* m, float* v, int64_t n,
                                               const AdamWStepConstants& c) {
  const __m256 decay = _mm256_set1_ps(c.decay), beta1 = _mm256_set1_ps(c.beta1),
               one_minus_beta1 = _mm256_set1_ps(c.one_minus_beta1), beta2 = _mm256_set1_ps(c.beta2),
               one_minus_beta2 = _mm256_set1_ps(c.one_minus_beta2), sqrt_bc2 = _mm256_set1_ps(c.sqrt_bias_correction2),
               eps = _mm256_set1_ps(c.eps), neg_step_size = _mm256_set1_ps(c.neg_step_size);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 grad = _mm256_loadu_ps(g + i);
    __m256 param = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
    const __m256 exp_avg =
        _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), beta1), _mm256_mul_ps(one_minus_beta1, grad));
    const __m256 exp_avg_sq = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), beta2),
                                            _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, grad), grad));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(exp_avg_sq), sqrt_bc2), eps);
    param = _mm256_add_ps(param, _mm256_div_ps(_mm256_mul_ps(neg_step_size, exp_avg), denom));
    _mm256_storeu_ps(p + i, param);
    _mm256_storeu_ps(m + i, exp_avg);
    _mm256_storeu_ps(v + i, exp_avg_sq);
  }
  for (; i < n; ++i) step_one(p[i], g[i], m[i], v[i], c);
}
#endif

}  // namespace

AdamWStepConstants adamw_step_constants(double lr, double beta1, double beta2, double eps, double weight_decay,
                                        int64_t step) {
  // In double, as torch::optim::AdamW computes them, then rounded once to the tensor's fp32.
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  AdamWStepConstants c;
  c.decay = static_cast<float>(1 - lr * weight_decay);
  c.beta1 = static_cast<float>(beta1);
  c.one_minus_beta1 = static_cast<float>(1 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta2 = static_cast<float>(1 - beta2);
  c.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(eps);
  c.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  return c;
}

const char* adamw_kernel_isa() {
#if defined(__x86_64__)
  if (cpu_has_avx2()) return "avx2";
#endif
  return "generic";
}

void adamw_step_range(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStepConstants& c,
                      bool force_generic) {
#if defined(__x86_64__)
  if (!force_generic && cpu_has_avx2()) return step_avx2(p, g, m, v, n, c);
#endif
  step_generic(p, g, m, v, n, c);
}

}  // namespace fsdpp::optim
