// NumPy .npy and .npz reading (format::parse_npy, parse_npz); the first byte chooses, the rest is the file.
#include <cstdint>
#include <vector>

#include "etnp/error.h"
#include "format/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace etnp;
  if (size == 0) return 0;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  try {
    if (data[0] & 1) (void)format::parse_npz(bytes, "fuzz.npz");
    else (void)format::parse_npy(bytes, "fuzz.npy");
  } catch (const Error&) {
  }
  return 0;
}
