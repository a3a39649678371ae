#include "core/runtime/cuda_plugin.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

namespace fsdpp::runtime {

namespace {

constexpr const char* kPluginFile = "libfsdpp_cuda.so";

CudaPlugin registered_plugin;
std::atomic<bool> plugin_registered{false};
// Written once, under load_once; a function's static, so that a static initializer of another
// unit that asks before this unit's initializers ran finds it constructed.
std::string& load_status() {
  static std::string status = "not loaded";
  return status;
}

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

std::string plugin_setting() {
  const char* setting = std::getenv("FSDPP_CUDA_PLUGIN");
  return setting != nullptr ? setting : "auto";
}

bool is_path(const std::string& setting) { return setting.find('/') != std::string::npos; }

// The plugin's file, or "" with `why` set when it is not to be loaded.
std::string plugin_to_load(std::string& why) {
#if FSDPP_WITH_CUDA
  std::string mode = plugin_setting();
  if (mode == "off") {
    why = "not loaded: FSDPP_CUDA_PLUGIN=off";
    return "";
  }
  if (mode == "on") return kPluginFile;
  if (is_path(mode)) return mode;
  if (mode != "auto") {
    why = "not loaded: " + cuda_plugin_setting_error();
    return "";
  }
  // The driver library, not a device count: asking CUDA would need the runtime this decides
  // whether to load. A machine with a GPU has libcuda.so.1; libtorch_cuda opens it anyway.
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    why = "not loaded: no CUDA driver (libcuda.so.1) on this machine";
    return "";
  }
  return kPluginFile;
#else
  why = "not built: a CPU-only LibTorch";
  return "";
#endif
}

}  // namespace

std::string cuda_plugin_setting_error() {
  const std::string mode = plugin_setting();
  if (mode == "auto" || mode == "on" || mode == "off" || is_path(mode)) return "";
  return "FSDPP_CUDA_PLUGIN='" + mode + "': expected auto, on, off or a path to libfsdpp_cuda.so";
}

std::string nccl_engine_setting_error() {
  const char* value = std::getenv("FSDPP_NCCL_ENGINE");
  if (value == nullptr || std::string(value) == "c10d" || std::string(value) == "fsdpp") return "";
  return std::string("FSDPP_NCCL_ENGINE='") + value + "': expected c10d (ProcessGroupNCCL, the default) or fsdpp";
}

NcclEngine nccl_engine() {
  if (const std::string bad = nccl_engine_setting_error(); !bad.empty()) throw std::invalid_argument(bad);
  const char* value = std::getenv("FSDPP_NCCL_ENGINE");
  return value != nullptr && std::string(value) == "fsdpp" ? NcclEngine::Fsdpp : NcclEngine::C10d;
}

std::string nccl_engine_name() {
  return nccl_engine() == NcclEngine::C10d ? "c10d ProcessGroupNCCL"
                                           : "fsdpp's own NCCL group (FSDPP_NCCL_ENGINE=fsdpp)";
}

void register_cuda_plugin(const CudaPlugin& plugin) {
  registered_plugin = plugin;
  plugin_registered.store(true, std::memory_order_release);
}

void load_cuda_plugin() {
  static std::once_flag load_once;
  std::call_once(load_once, [] {
    // A program that links the plugin itself (suites' CUDA tests) registered it already.
    if (plugin_registered.load(std::memory_order_acquire)) {
      load_status() = "linked into this program";
      return;
    }
    std::string why;
    const std::string file = plugin_to_load(why);
    if (file.empty()) {
      load_status() = why;
      return;
    }
    // RTLD_GLOBAL: libtorch_cuda's symbols serve later lookups as when it is linked.
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      load_status() = "not loaded: " + dl_error();
      return;
    }
    if (!plugin_registered.load(std::memory_order_acquire)) {
      load_status() = "not loaded: " + file + " registered no plugin";
      return;
    }
    Dl_info info{};
    void* symbol = dlsym(handle, "fsdpp_cuda_plugin_marker");
    load_status() =
        "loaded from " + std::string(symbol != nullptr && dladdr(symbol, &info) != 0 && info.dli_fname != nullptr
                                         ? info.dli_fname
                                         : file.c_str());
  });
}

const CudaPlugin* cuda_plugin() {
  load_cuda_plugin();
  return plugin_registered.load(std::memory_order_acquire) ? &registered_plugin : nullptr;
}

std::string cuda_plugin_status() {
  load_cuda_plugin();
  return load_status();
}

}  // namespace fsdpp::runtime

// Every program that links fsdpp_core links this unit (core/CMakeLists.txt names the symbol
// to the linker), so that the plugin is loaded before main(), ahead of any CUDA query.
extern "C" void fsdpp_cuda_plugin_anchor() {}

namespace {
const bool cuda_plugin_loaded_at_start = (fsdpp::runtime::load_cuda_plugin(), true);
}  // namespace
