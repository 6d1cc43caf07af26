// Load and execute every method, with inputs made from the fuzz data: the last (up to) 64 bytes are the
// pattern that fills tensor inputs, picks dims within a dynamic tensor's bounds and gives scalar inputs.
// Bounded by fuzz_util.h's resource limits and libFuzzer's -timeout/-rss_limit_mb.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "etnp/error.h"
#include "etnp/program.h"
#include "fuzz/fuzz_util.h"

namespace {

using namespace etnp;

struct Pattern {
  std::span<const uint8_t> bytes;
  size_t next = 0;
  uint8_t byte() { return bytes.empty() ? 0 : bytes[next++ % bytes.size()]; }
};

void run_method(const Program& program, const std::string& name, Pattern& pattern) {
  const MethodMeta meta = program.method_meta(name);
  auto method = program.load_method(name);
  std::vector<std::vector<uint8_t>> storage;
  std::vector<Value> inputs;
  for (const ValueInfo& in : meta.inputs) {
    switch (in.tag) {
      case Tag::Tensor: {
        TensorRef t{in.tensor.dtype, in.tensor.sizes, in.tensor.dim_order, nullptr};
        if (in.tensor.dynamism != ShapeDynamism::Static)
          for (int64_t& d : t.sizes) d = d > 0 ? pattern.byte() % (d + 1) : d;
        std::vector<uint8_t> bytes(in.tensor.nbytes);  // at most max_tensor_bytes: load_method checked it
        for (uint8_t& b : bytes) b = pattern.byte();
        t.data = bytes.data();
        storage.push_back(std::move(bytes));
        inputs.emplace_back(std::move(t));
        break;
      }
      case Tag::Int: inputs.emplace_back(static_cast<int64_t>(static_cast<int8_t>(pattern.byte()))); break;
      case Tag::Double: inputs.emplace_back(static_cast<double>(static_cast<int8_t>(pattern.byte())) / 4); break;
      case Tag::Bool: inputs.emplace_back(static_cast<bool>(pattern.byte() & 1)); break;
      default: inputs.push_back(in.value); break;
    }
  }
  for (int run = 0; run < 2; ++run) {
    try {
      (void)method->execute(inputs);
    } catch (const Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* input, size_t size) {
  // The program's bytes on a read-only page, as a file's mapping is: a write into them faults where it happens.
  const size_t mapped = (size + 4095) / 4096 * 4096 + 4096;
  void* page = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return 0;
  std::memcpy(page, input, size);
  mprotect(page, mapped, PROT_READ);
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{page, mapped};
  const uint8_t* data = static_cast<const uint8_t*>(page);
  const std::span<const uint8_t> bytes(data, size);
  Pattern pattern{bytes.subspan(size - std::min<size_t>(size, 64))};
  try {
    const Program program = Program::load_buffer(bytes, nullptr, fuzz::bounded_options());
    for (const std::string& name : program.method_names()) {
      try {
        run_method(program, name, pattern);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
