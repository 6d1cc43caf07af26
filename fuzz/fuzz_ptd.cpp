// External data files (.ptd): PtdFile::parse, then every key's bytes and layout.
#include <cstdint>

#include "etnp/error.h"
#include "format/ptd_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace etnp;
  try {
    auto ptd = format::PtdFile::parse(format::ByteSource::from_buffer({data, size}, nullptr, "fuzz.ptd"));
    for (size_t i = 0; i < ptd->num_keys(); ++i) {
      (void)ptd->get(ptd->key(i));
      (void)ptd->layout(ptd->key(i));
    }
    const format::MergedDataMap merged({ptd.get(), ptd.get()});  // every key twice: the duplicate-key error
    (void)merged.num_keys();
  } catch (const Error&) {
  }
  return 0;
}
