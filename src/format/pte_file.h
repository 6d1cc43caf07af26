// A verified .pte program: header, identifier, FlatBuffers structure and every index, offset and size the
// runtime later follows. Nothing here trusts the file; everything after parse() may.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "etnp/named_data.h"
#include "etnp/file_info.h"
#include "etnp/tensor.h"
#include "format/byte_source.h"
#include "program_generated.h"

namespace etnp::format {

namespace fb = ::executorch_flatbuffer;

/// The 'eh00' header that follows the identifier when a program has segments.
struct ExtendedHeader {
  bool present = false;
  uint32_t length = 0;
  uint64_t program_size = 0;
  uint64_t segment_base_offset = 0;
  uint64_t segment_data_size = 0;
};

/// Reads the header of a .pte; throws ProgramLoadError with a message that says what the bytes are when
/// they are not an ExecuTorch program (ZIP/TorchScript archive, text, another schema version, ...).
ExtendedHeader read_pte_header(std::span<const uint8_t> bytes);

class PteFile {
 public:
  /// Parses and verifies. Verification::Minimal checks the container and FlatBuffers structure;
  /// InternalConsistency also validates every method (validate_plan).
  static std::unique_ptr<PteFile> parse(std::shared_ptr<ByteSource> source, Verification level);

  const fb::Program& program() const { return *program_; }
  const ExtendedHeader& header() const { return header_; }
  const ByteSource& source() const { return *source_; }
  const std::shared_ptr<ByteSource>& source_ptr() const { return source_; }

  /// Index of the method called `name`, or nullopt.
  std::optional<size_t> find_plan(std::string_view name) const;
  const fb::ExecutionPlan& plan(size_t index) const { return *program_->execution_plan()->Get(index); }
  size_t num_plans() const;

  /// Checks everything about one method that loading it relies on. Throws ProgramLoadError naming the
  /// method and the offending value/instruction. Cheap enough to run on every load_method.
  void validate_plan(const fb::ExecutionPlan& plan) const;

  /// Segment bytes (bounds were verified at parse).
  std::span<const uint8_t> segment(size_t index) const;
  /// Constant tensor data for Tensor.data_buffer_idx (constant segment or legacy constant_buffer).
  std::span<const uint8_t> constant(uint32_t buffer_index, size_t nbytes) const;
  /// Initial bytes of a mutable tensor (mutable_data_segments[0].offsets[buffer_index]).
  std::span<const uint8_t> mutable_initial_data(uint32_t buffer_index, size_t nbytes) const;
  /// The payload of a delegate (inline data or a segment).
  std::span<const uint8_t> delegate_payload(const fb::BackendDelegate& delegate) const;
  /// The program's own named data (nullptr when it has none).
  const NamedDataMap* named_data() const { return named_data_.get(); }

  ProgramInfo info() const;

 private:
  PteFile() = default;
  void verify_container();
  void check_vector_alignment() const;
  bool uses_legacy_constants() const;

  std::shared_ptr<ByteSource> source_;
  ExtendedHeader header_;
  const fb::Program* program_ = nullptr;
  std::span<const uint8_t> constant_segment_;
  std::unique_ptr<NamedDataMap> named_data_;
};

/// nbytes of a serialized tensor; throws ProgramLoadError on overflow or a bad dtype.
size_t serialized_tensor_nbytes(const fb::Tensor& tensor);

}  // namespace etnp::format
