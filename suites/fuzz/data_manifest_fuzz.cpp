// Fuzz target: manifest.json of a prepared data directory (format "fsdpp.data-manifest",
// version 1; core/data/TOKENS.md).
//
// Feeds the input, written as manifest.json in a scratch folder, to
// data::read_data_manifest (core/data/data_manifest.cpp), which parses it with
// io::parse_json_text (core/io/yaml_json.cpp) and checks format, version and every field.
// A manifest it accepts is written back with to_json and read again: the round trip must
// give the same document.
//
// Expected: a std::exception naming the file and field. Finding: anything else (crash,
// sanitizer report, non-std exception, hang, huge allocation), or a round trip that changes
// an accepted manifest.
#include <cstdint>

#include "core/data/data_manifest.h"
#include "suites/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdpp::fuzz::write_scratch("manifest.json", data, size);
  fsdpp::fuzz::reader_may_reject([&] {
    const auto manifest = fsdpp::data::read_data_manifest(fsdpp::fuzz::scratch_dir());
    const auto again = fsdpp::data::DataManifest::from_json(manifest.to_json(), "round trip");
    fsdpp::fuzz::check_invariant(again.to_json() == manifest.to_json(), "manifest changed in a to_json round trip");
  });
  return 0;
}
