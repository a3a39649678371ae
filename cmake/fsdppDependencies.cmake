# The packages fsdpp is built against, found one way for two callers: fsdpp's own build
# (CMakeLists.txt) and a project that uses the installed package (fsdppConfig.cmake, which
# installs this file beside itself). Included, not called, so that the packages' imported
# targets, and the enable_language(CUDA) that a CUDA LibTorch's config runs, land in the
# caller's directory.
#
# Sets: Torch's variables (TORCH_LIBRARIES, Torch_VERSION, TORCH_INSTALL_PREFIX, ...),
# FSDPP_WITH_CUDA (the LibTorch found is a CUDA build), FSDPP_GLOO_INCLUDE,
# FSDPP_TORCH_HOST_LIBRARIES and FSDPP_TORCH_HOST_INCLUDE_DIRS (what fsdpp's programs link
# and include of LibTorch), and with CUDA FSDPP_NCCL_INCLUDE and FSDPP_NCCL_LIBRARY.
#
# A missing package stops fsdpp's configure with a message that says what to install; in a
# package config (_fsdpp_as_package set) it makes find_package(fsdpp) fail with that message
# instead (fsdpp_FOUND false, fsdpp_NOT_FOUND_MESSAGE), as find_dependency does.

macro(_fsdpp_dependency_error text)
  if(_fsdpp_as_package)
    set(fsdpp_NOT_FOUND_MESSAGE "${text}")
    set(fsdpp_FOUND FALSE)
    return()
  else()
    message(FATAL_ERROR "${text}")
  endif()
endmacro()

# find_package(<args> REQUIRED) in the build; find_dependency(<args>) in a package config.
macro(_fsdpp_find_dependency)
  if(_fsdpp_as_package)
    find_dependency(${ARGV})
  else()
    find_package(${ARGV} REQUIRED)
  endif()
endmacro()

_fsdpp_find_dependency(Torch)
# The oldest LibTorch the compat layer (core/compat/torch_compat.h) supports; CI builds and
# tests 2.11.0 only (ci/requirements.lock).
set(FSDPP_MIN_TORCH 2.4)
if(Torch_VERSION VERSION_LESS FSDPP_MIN_TORCH)
  _fsdpp_dependency_error("fsdpp needs LibTorch >= ${FSDPP_MIN_TORCH}; the one found at ${TORCH_INSTALL_PREFIX} is ${Torch_VERSION} (bash ci/setup.sh installs 2.11.0 into .venv)")
endif()
_fsdpp_find_dependency(nlohmann_json 3)
_fsdpp_find_dependency(CLI11 CONFIG)
_fsdpp_find_dependency(Threads)
_fsdpp_find_dependency(yaml-cpp)  # data prepare's .yaml inputs, --config files
# SHA-256 of checkpoint files (core/checkpoint/sha256.cpp) comes from OpenSSL's libcrypto.
_fsdpp_find_dependency(OpenSSL COMPONENTS Crypto)
# The benchmark matrix, `fsdpp bench` (harness/bench/matrix_run.h): Google Benchmark runs
# the cells (Debian: libbenchmark-dev, installed by ci/setup.sh).
find_package(benchmark QUIET)
if(NOT benchmark_FOUND)
  _fsdpp_dependency_error("Google Benchmark not found: install libbenchmark-dev (ci/setup.sh does)")
endif()

# c10d's Gloo backend: ProcessGroupGloo.hpp includes gloo's headers, which PyPI's wheel does
# not ship; Debian's libgloo-dev provides them. Only the headers: libtorch carries its own
# gloo, and linking a second one would put two copies of its symbols in one process.
find_path(FSDPP_GLOO_INCLUDE gloo/context.h HINTS ${TORCH_INCLUDE_DIRS})
if(NOT FSDPP_GLOO_INCLUDE)
  _fsdpp_dependency_error("gloo headers (gloo/context.h) not found: install libgloo-dev (ci/setup.sh does)")
endif()

# CUDA LibTorch (PyPI's wheel): NCCL communicator for GPU tensors.
set(FSDPP_WITH_CUDA OFF)
if(TORCH_CUDA_LIBRARIES OR TARGET torch_cuda)
  set(FSDPP_WITH_CUDA ON)
endif()
if(FSDPP_WITH_CUDA)
  # The NCCL that libtorch loads at run time: the wheel's nvidia/nccl (it has only
  # libnccl.so.2), searched per directory so that the toolkit's libnccl.so does not win.
  get_filename_component(_fsdpp_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
  find_path(FSDPP_NCCL_INCLUDE nccl.h HINTS "${_fsdpp_site}/nvidia/nccl/include" ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(FSDPP_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
               HINTS "${_fsdpp_site}/nvidia/nccl/lib" ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  if(NOT FSDPP_NCCL_INCLUDE OR NOT FSDPP_NCCL_LIBRARY)
    _fsdpp_dependency_error("CUDA LibTorch found but no NCCL (nccl.h, libnccl): set NCCL_HOME")
  endif()
endif()

# What fsdpp's libraries and programs link from LibTorch. A CUDA build links only its CPU
# libraries: fsdpp's CUDA code is a plugin, libfsdpp_cuda.so, that links the rest and is loaded
# at start where the machine has a CUDA driver (core/runtime/cuda_plugin.h), so that a process
# on a machine without one does not load the CUDA libraries.
if(FSDPP_WITH_CUDA)
  set(FSDPP_TORCH_HOST_LIBRARIES torch_cpu_library c10)
  # CUDART_VERSION (harness/cli/build_info.cpp): the toolkit's headers, which LibTorch's found.
  set(FSDPP_TORCH_HOST_INCLUDE_DIRS ${TORCH_INCLUDE_DIRS} ${CUDAToolkit_INCLUDE_DIRS})
else()
  set(FSDPP_TORCH_HOST_LIBRARIES ${TORCH_LIBRARIES})
  set(FSDPP_TORCH_HOST_INCLUDE_DIRS ${TORCH_INCLUDE_DIRS})
endif()
