// ETDump (.etdp) parsing; what parses is written again and parsed back.
#include <cstdint>

#include "etnp/error.h"
#include "format/etdump.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace etnp;
  try {
    if (!format::is_etdump({data, size})) return 0;
    const auto blocks = format::parse_etdump({data, size});
    (void)format::parse_etdump(format::write_etdump(blocks));
  } catch (const Error&) {
  }
  return 0;
}
