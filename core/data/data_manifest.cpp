#include "core/data/data_manifest.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/io/yaml_json.h"

namespace fsdpp::data {

namespace {

using Json = nlohmann::ordered_json;

const Json& field(const Json& j, const char* name, Json::value_t type, const std::string& where) {
  if (!j.is_object() || !j.contains(name)) throw std::invalid_argument(where + ": missing field '" + name + "'");
  const Json& v = j.at(name);
  const bool ok = v.type() == type || (type == Json::value_t::number_integer && v.is_number_unsigned()) ||
                  (type == Json::value_t::number_float && v.is_number());
  if (!ok)
    throw std::invalid_argument(where + ": field '" + name + "' is a " + v.type_name() + " (expected a " +
                                Json(type).type_name() + ")");
  return v;
}

int64_t count(const Json& j, const char* name, const std::string& where) {
  const int64_t v = field(j, name, Json::value_t::number_integer, where).get<int64_t>();
  if (v < 0) throw std::invalid_argument(where + ": field '" + name + "' is negative (expected a count)");
  return v;
}

Json shards_json(const std::vector<ShardEntry>& shards) {
  Json out = Json::array();
  for (const auto& s : shards) out.push_back({{"file", s.file}, {"tokens", s.tokens}, {"documents", s.documents}});
  return out;
}

std::vector<ShardEntry> shards_from(const Json& list, const std::string& where) {
  std::vector<ShardEntry> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    out.push_back({field(list[i], "file", Json::value_t::string, at).get<std::string>(), count(list[i], "tokens", at),
                   count(list[i], "documents", at)});
  }
  return out;
}

}  // namespace

nlohmann::ordered_json DataManifest::to_json() const {
  return {{"format", kManifestFormat},
          {"version", kManifestVersion},
          {"source", source},
          {"tokenizer", tokenizer},
          {"options", options},
          {"dtype", dtype},
          {"documents",
           {{"in_input", documents_in_input},
            {"selected", documents_selected},
            {"train", train_documents},
            {"eval", eval_documents}}},
          {"tokens", {{"train", train_tokens}, {"eval", eval_tokens}}},
          {"shards", {{"train", shards_json(train_shards)}, {"eval", shards_json(eval_shards)}}}};
}

DataManifest DataManifest::from_json(const nlohmann::ordered_json& j, const std::string& where) {
  using T = Json::value_t;
  const auto format = field(j, "format", T::string, where).get<std::string>();
  if (format != kManifestFormat)
    throw std::invalid_argument(where + ": format '" + format + "' (expected '" + kManifestFormat + "')");
  const auto version = field(j, "version", T::number_integer, where).get<int64_t>();
  if (version != kManifestVersion)
    throw std::invalid_argument(where + ": manifest version " + std::to_string(version) +
                                " is not supported (expected 1)");
  DataManifest m;
  m.source = field(j, "source", T::object, where);
  m.tokenizer = field(j, "tokenizer", T::object, where);
  m.options = field(j, "options", T::object, where);
  m.dtype = field(j, "dtype", T::string, where).get<std::string>();
  if (m.dtype != "uint16" && m.dtype != "uint32")
    throw std::invalid_argument(where + ": dtype '" + m.dtype + "' (expected uint16 or uint32)");
  const auto& docs = field(j, "documents", T::object, where);
  m.documents_in_input = count(docs, "in_input", where + ": documents");
  m.documents_selected = count(docs, "selected", where + ": documents");
  m.train_documents = count(docs, "train", where + ": documents");
  m.eval_documents = count(docs, "eval", where + ": documents");
  const auto& tokens = field(j, "tokens", T::object, where);
  m.train_tokens = count(tokens, "train", where + ": tokens");
  m.eval_tokens = count(tokens, "eval", where + ": tokens");
  const auto& shards = field(j, "shards", T::object, where);
  m.train_shards = shards_from(field(shards, "train", T::array, where + ": shards"), where + ": shards.train");
  m.eval_shards = shards_from(field(shards, "eval", T::array, where + ": shards"), where + ": shards.eval");
  return m;
}

DataManifest read_data_manifest(const std::filesystem::path& path) {
  const auto file = std::filesystem::is_directory(path) ? path / "manifest.json" : path;
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(file.string() + ": cannot read data manifest");
  std::ostringstream text;
  text << in.rdbuf();
  return DataManifest::from_json(io::parse_json_text<Json>(text.str(), file.string()), file.string());
}

}  // namespace fsdpp::data
