// JSON and YAML text as nlohmann::json values: config files (`fsdpp train --config`) and
// the JSON/YAML inputs of `fsdpp data prepare`.
//
// YAML -> JSON: mappings become objects (keys must be scalars, no duplicates), sequences
// arrays. A plain (unquoted, untagged) scalar is resolved with YAML 1.2's core schema:
// null / Null / NULL / ~ / empty -> null; true / True / TRUE / false / False / FALSE ->
// boolean; decimal, 0x hex and 0o octal integers -> integer (too large: float); decimal
// floats (1.5, -2e3, .5) -> float. Everything else, and every quoted, block (| >) or
// !!str-tagged scalar, is a string. YAML 1.1's yes/no/on/off stay strings, and so do
// .inf and .nan, which JSON cannot hold. Aliases are expanded.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <string>

namespace fsdpp::io {

// The single YAML document in `text` (null if there is none). Throws
// std::invalid_argument "<source>:<line>:<column>: ..." for invalid YAML, a non-scalar
// or duplicate mapping key, or more than one document. `Json` is nlohmann::json (keys
// sorted) or nlohmann::ordered_json (keys in the order written).
template <class Json = nlohmann::json>
Json yaml_to_json(const std::string& text, const std::string& source);

// Every YAML document in `text`, in order, as an array. Throws as yaml_to_json.
template <class Json = nlohmann::json>
Json yaml_documents_to_json(const std::string& text, const std::string& source);

// JSON text; throws std::invalid_argument "<source>: invalid JSON: ... at line L, column C".
template <class Json = nlohmann::json>
Json parse_json_text(const std::string& text, const std::string& source);

// A .json, .yaml or .yml file (by extension), parsed as above. Throws
// std::runtime_error naming the file if it cannot be read or has another extension, and
// std::invalid_argument naming the file and line if its content is invalid.
nlohmann::json load_json_or_yaml_file(const std::filesystem::path& path);

}  // namespace fsdpp::io
