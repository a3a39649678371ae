// Fuzz target: an fsdpp.results document (results/README.md, schema results/schema/v1.json),
// of the current version or of version 0.
//
// Feeds the input, written to a scratch file, to results::load_results
// (harness/results/results_document.cpp): parse_json_lenient (Google Benchmark's bare NaN
// and Infinity), migrate_to_current (version 0 -> 1) and validate_results (the embedded
// schema through harness/results/json_schema.cpp, then unique cell ids). This is what
// `fsdpp results compare`, the dashboard and the history read. A document it accepts must
// validate again after a dump and re-parse.
//
// Expected: a std::exception naming the file and the JSON pointer. Finding: anything else
// (crash, sanitizer report, non-std exception, hang, huge allocation), or an accepted
// document that no longer validates once written out.
#include <nlohmann/json.hpp>

#include <cstdint>

#include "harness/results/results_document.h"
#include "suites/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fsdpp::fuzz::write_scratch("results.json", data, size);
  nlohmann::json doc;
  try {
    doc = fsdpp::results::load_results(path);
  } catch (const std::exception&) {
    return 0;
  }
  try {
    // What write_results does with it, then what load_results does with that.
    fsdpp::results::validate_results(nlohmann::json::parse(doc.dump(1)), "rewritten document");
  } catch (const std::exception& e) {
    fsdpp::fuzz::check_invariant(false, std::string("accepted document cannot be written and read back: ") + e.what());
  }
  return 0;
}
