#include "core/comm/rendezvous.h"

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace fsdpp::comm {
namespace {

int parse_int(const std::string& name, const std::string& text, int min_value) {
  size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < min_value || value > 1 << 30)
    throw std::invalid_argument("environment variable " + name + "='" + text +
                                "': expected an integer >= " + std::to_string(min_value));
  return static_cast<int>(value);
}

std::optional<int> env_int(const EnvLookup& env, const std::string& name, int min_value) {
  auto text = env(name);
  if (!text) return std::nullopt;
  return parse_int(name, *text, min_value);
}

// SLURM_TASKS_PER_NODE looks like "2(x3),1": the first node's count is what a
// homogeneous job has on every node.
std::optional<int> slurm_tasks_per_node(const EnvLookup& env) {
  for (const char* name : {"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    auto text = env(name);
    if (!text) continue;
    std::string head = text->substr(0, text->find_first_of("(,"));
    return parse_int(name, head, 1);
  }
  return std::nullopt;
}

// Splits "a[1-2],b,c[3]" at commas that are outside brackets.
std::vector<std::string> split_top_level(const std::string& list) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) throw std::invalid_argument("SLURM nodelist '" + list + "': unbalanced ']'");
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) throw std::invalid_argument("SLURM nodelist '" + list + "': unbalanced '['");
  parts.push_back(current);
  for (const auto& p : parts)
    if (p.empty()) throw std::invalid_argument("SLURM nodelist '" + list + "': empty host name");
  return parts;
}

void expand_one(const std::string& whole, const std::string& item, std::vector<std::string>& out) {
  auto open = item.find('[');
  if (open == std::string::npos) {
    out.push_back(item);
    return;
  }
  auto close = item.find(']', open);
  std::string prefix = item.substr(0, open);
  std::string ranges = item.substr(open + 1, close - open - 1);
  std::string suffix = item.substr(close + 1);
  if (ranges.empty()) throw std::invalid_argument("SLURM nodelist '" + whole + "': empty range '[]'");
  std::stringstream ss(ranges);
  std::string range;
  while (std::getline(ss, range, ',')) {
    auto dash = range.find('-');
    std::string lo = range.substr(0, dash);
    std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    auto digits = [&](const std::string& s) {
      if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
        throw std::invalid_argument("SLURM nodelist '" + whole + "': bad range '" + range + "'");
      return std::stol(s);
    };
    long a = digits(lo), b = digits(hi);
    if (b < a) throw std::invalid_argument("SLURM nodelist '" + whole + "': descending range '" + range + "'");
    size_t width = lo.size();
    for (long i = a; i <= b; ++i) {
      std::string num = std::to_string(i);
      if (num.size() < width) num.insert(0, width - num.size(), '0');
      expand_one(whole, prefix + num + suffix, out);
    }
  }
}

}  // namespace

std::string WorldSpec::describe() const {
  std::ostringstream os;
  os << "world: rank=" << rank << " world_size=" << world_size << " local_rank=" << local_rank
     << " local_world_size=" << local_world_size << " master=" << master_addr << ":" << master_port
     << " source=" << source << (agent_store ? " agent_store" : "");
  return os.str();
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

EnvLookup env_from_map(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::vector<std::string> expand_slurm_hostlist(const std::string& nodelist) {
  if (nodelist.empty()) throw std::invalid_argument("SLURM nodelist is empty");
  std::vector<std::string> hosts;
  for (const auto& item : split_top_level(nodelist)) expand_one(nodelist, item, hosts);
  return hosts;
}

std::string first_slurm_host(const std::string& nodelist) {
  // Expanding only the first item keeps this cheap for huge ranges.
  return expand_slurm_hostlist(split_top_level(nodelist).front()).front();
}

WorldSpec resolve_world(const EnvLookup& env, const WorldOverrides& overrides) {
  WorldSpec spec;
  if (env("RANK") || env("WORLD_SIZE")) {
    spec.source = "torchrun";
    if (!env("RANK") || !env("WORLD_SIZE"))
      throw std::invalid_argument("torchrun environment: RANK and WORLD_SIZE must be set together");
    spec.rank = *env_int(env, "RANK", 0);
    spec.world_size = *env_int(env, "WORLD_SIZE", 1);
    spec.local_rank = env_int(env, "LOCAL_RANK", 0).value_or(spec.rank);
    spec.local_world_size = env_int(env, "LOCAL_WORLD_SIZE", 1).value_or(spec.world_size);
    spec.agent_store = env("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True");
    spec.restart_count = env_int(env, "TORCHELASTIC_RESTART_COUNT", 0).value_or(0);
  } else if (env("SLURM_PROCID")) {
    spec.source = "slurm";
    spec.rank = *env_int(env, "SLURM_PROCID", 0);
    auto ntasks = env_int(env, "SLURM_NTASKS", 1);
    if (!ntasks) throw std::invalid_argument("SLURM environment: SLURM_PROCID is set but SLURM_NTASKS is not");
    spec.world_size = *ntasks;
    spec.local_rank = env_int(env, "SLURM_LOCALID", 0).value_or(0);
    spec.local_world_size = slurm_tasks_per_node(env).value_or(spec.world_size);
    auto nodelist = env("SLURM_JOB_NODELIST");
    if (!nodelist) nodelist = env("SLURM_NODELIST");
    if (nodelist) spec.master_addr = first_slurm_host(*nodelist);
  }
  if (auto addr = env("MASTER_ADDR")) {
    if (addr->empty()) throw std::invalid_argument("environment variable MASTER_ADDR is empty");
    spec.master_addr = *addr;
  }
  if (auto port = env_int(env, "MASTER_PORT", 1)) spec.master_port = *port;

  bool any_override = overrides.rank || overrides.world_size || overrides.local_rank || overrides.local_world_size ||
                      overrides.master_addr || overrides.master_port;
  if (any_override) spec.source = "explicit";
  if (overrides.rank) spec.rank = *overrides.rank;
  if (overrides.world_size) spec.world_size = *overrides.world_size;
  if (overrides.local_rank) spec.local_rank = *overrides.local_rank;
  if (overrides.local_world_size) spec.local_world_size = *overrides.local_world_size;
  if (overrides.master_addr) spec.master_addr = *overrides.master_addr;
  if (overrides.master_port) spec.master_port = *overrides.master_port;
  if (overrides.master_addr || overrides.master_port) spec.agent_store = false;

  if (spec.world_size < 1) throw std::invalid_argument("world size must be >= 1");
  if (spec.rank < 0 || spec.rank >= spec.world_size)
    throw std::invalid_argument("rank " + std::to_string(spec.rank) + " is outside world size " +
                                std::to_string(spec.world_size));
  if (spec.local_world_size < 1 || spec.local_rank < 0 || spec.local_rank >= spec.local_world_size)
    throw std::invalid_argument("local rank " + std::to_string(spec.local_rank) + " is outside local world size " +
                                std::to_string(spec.local_world_size));
  if (spec.master_port < 1 || spec.master_port > 65535)
    throw std::invalid_argument("master port " + std::to_string(spec.master_port) + " is outside 1..65535");
  return spec;
}

}  // namespace fsdpp::comm
