// GoogleTest helpers over the equivalence runner.
#pragma once

#include <functional>

#include "harness/equiv/equivalence.h"
#include "harness/testing/multirank.h"

namespace fsdpp::harness {

// Runs the equivalence on world_size ranks; the test fails unless rank 0's report is ok
// (its table is printed in the failure). `inspect`, if given, also sees rank 0's report.
void expect_equivalent(int world_size, const std::function<EquivModel()>& model, const EquivConfig& config,
                       const std::function<void(const EquivReport&)>& inspect = nullptr);

}  // namespace fsdpp::harness
