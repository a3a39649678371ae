// The fsdpp executable the CLI suites run (FSDPP_CLI_PATH, set by suites/CMakeLists.txt).
#pragma once

#include <string>

namespace fsdpp {

inline const std::string kFsdpp = FSDPP_CLI_PATH;

}  // namespace fsdpp
