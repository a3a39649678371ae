#pragma once

#include <string>

namespace fsdpp::results {

// printf's formatting into a std::string, of any length: the tables and reports of results
// documents format their figures with it.
std::string printf_text(const char* pattern, ...) __attribute__((format(printf, 1, 2)));

}  // namespace fsdpp::results
