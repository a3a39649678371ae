// Fuzz target: one safetensors file (core/io/SAFETENSORS.md).
//
// Feeds the input, written to a scratch file, to io::SafetensorsFile::open
// (core/io/safetensors.cpp), which maps the file and validates its 8-byte length, JSON
// header and data offsets. For a file it accepts, every tensor is then read back as a view
// and as a copy, and the header's promises are checked: offsets inside the byte buffer,
// END - BEGIN == numel x element size, the buffer covered without gaps.
//
// Expected: open() or tensor() throwing a std::exception (a bad file, a dtype LibTorch
// lacks). Finding: anything else (crash, sanitizer report, non-std exception, hang, huge
// allocation), or a broken promise for a file open() accepted.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/io/safetensors.h"
#include "suites/fuzz/fuzz_support.h"

namespace {

using fsdpp::fuzz::check_invariant;

// Every byte of `t` read through memcpy, so a view that points outside the mapping faults
// here rather than somewhere later.
void touch_bytes(const at::Tensor& t) {
  std::vector<uint8_t> copy(t.nbytes());
  if (!copy.empty()) std::memcpy(copy.data(), t.data_ptr(), copy.size());
}

void read_every_tensor(const fsdpp::io::SafetensorsFile& file) {
  uint64_t covered = 0;
  for (const auto& name : file.names()) {
    const auto& info = file.info(name);
    check_invariant(info.begin <= info.end && info.end <= file.data_bytes(),
                    "tensor '" + name + "' offsets outside the byte buffer");
    check_invariant(info.begin == covered, "tensor '" + name + "' does not start where the previous one ended");
    covered = info.end;
    fsdpp::fuzz::reader_may_reject([&] {
      const at::Tensor view = file.tensor(name);
      check_invariant(view.nbytes() == info.byte_size(), "tensor '" + name + "' view size differs from its offsets");
      touch_bytes(view);
      touch_bytes(file.copy_tensor(name));
    });
  }
  check_invariant(covered == file.data_bytes(), "byte buffer not covered by the tensors");
  for (const auto& [key, value] : file.metadata()) (void)key.size(), (void)value.size();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);  // one core per fuzzer (suites/fuzz/README.md)
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fsdpp::fuzz::write_scratch("input.safetensors", data, size);
  fsdpp::fuzz::reader_may_reject([&] { read_every_tensor(fsdpp::io::SafetensorsFile::open(path)); });
  return 0;
}
