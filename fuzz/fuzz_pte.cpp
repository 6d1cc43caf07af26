// The .pte reader and verifier: header, container, FlatBuffers structure (Verification::Minimal), then every
// method's plan (InternalConsistency, validate_plan) and what loading reads from a verified file.
#include <cstdint>
#include <memory>

#include "etnp/error.h"
#include "format/pte_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace etnp;
  const std::span<const uint8_t> bytes(data, size);
  for (Verification level : {Verification::Minimal, Verification::InternalConsistency}) {
    try {
      auto pte = format::PteFile::parse(format::ByteSource::from_buffer(bytes, nullptr, "fuzz.pte"), level);
      (void)pte->info();
      for (size_t i = 0; i < pte->num_plans(); ++i) pte->validate_plan(pte->plan(i));
    } catch (const Error&) {
    }
  }
  return 0;
}
