// Bundled programs (.bpte, identifier "BP08"): a complete .pte plus test cases (inputs and expected outputs)
// for its methods. parse() verifies the whole FlatBuffer and every tensor's size/shape/dim order before
// anything is exposed, so callers can use the results without further checks.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "etnp/scalar_type.h"
#include "etnp/tensor.h"

namespace etnp::format {

/// A test tensor: `data` holds numel * element_size bytes laid out in `dim_order`.
struct BundledTensor {
  ScalarType dtype = ScalarType::Float;
  std::vector<int64_t> sizes;
  std::vector<uint8_t> dim_order;   ///< A permutation of 0..rank-1 (contiguous when the file had none).
  std::span<const uint8_t> data;    ///< Points into the BundledProgram's bytes.

  int64_t numel() const;
  /// A tensor over `data` (static shape), e.g. to pass as a method input. Read-only: `data` lives in the
  /// bundled program's bytes, so nothing may write through the view.
  Tensor view() const;
};

/// A test input or expected output.
struct BundledValue {
  enum class Kind : uint8_t { Tensor, Int, Bool, Double };
  Kind kind = Kind::Int;
  BundledTensor tensor;      ///< Kind::Tensor
  int64_t int_value = 0;     ///< Kind::Int
  bool bool_value = false;   ///< Kind::Bool
  double double_value = 0;   ///< Kind::Double
};

struct BundledTestCase {
  std::vector<BundledValue> inputs;            ///< Every method input, in order.
  std::vector<BundledValue> expected_outputs;  ///< Every method output, in order (may be empty).
};

struct BundledMethodTests {
  std::string method_name;
  std::vector<BundledTestCase> test_cases;
};

class BundledProgram {
 public:
  /// True when `bytes` carry the BP08 identifier at bytes 4..8 (what the reference runtime checks).
  static bool is_bundled_program(std::span<const uint8_t> bytes);

  /// Verifies and decodes a .bpte. The bytes are used in place when 16-byte aligned (kept alive by
  /// `keep_alive`, which may be null when the caller guarantees the lifetime); otherwise they are copied.
  /// Throws etnp::Error(ProgramLoadError) saying what is wrong.
  static BundledProgram parse(std::span<const uint8_t> bytes, std::shared_ptr<const void> keep_alive = nullptr);
  /// Reads and parses a file. Throws ProgramLoadError (unreadable or invalid file).
  static BundledProgram load_file(const std::string& path);

  /// Schema version written by the exporter (2 today).
  uint32_t version() const { return version_; }
  /// The embedded .pte file, byte for byte (32-byte aligned relative to the start of the .bpte).
  std::span<const uint8_t> program() const { return program_; }
  const std::vector<BundledMethodTests>& method_test_suites() const { return suites_; }
  /// What keeps the bytes behind program() and the tensors alive (null when the caller owns them), e.g. for
  /// Program::load_buffer(program(), bytes_owner()).
  const std::shared_ptr<const void>& bytes_owner() const { return keep_alive_; }
  /// The suite of `method`, or nullptr.
  const BundledMethodTests* find_method(std::string_view method) const;

 private:
  std::shared_ptr<const void> keep_alive_;
  uint32_t version_ = 0;
  std::span<const uint8_t> program_;
  std::vector<BundledMethodTests> suites_;
};

/// Compares a method output with an expected bundled tensor, as the reference verify_method_outputs does:
/// dtype, sizes and the strides implied by the dim order must be equal; float32/float64/float16/bfloat16
/// elements match when |actual - expected| <= atol + rtol * |expected| (NaN equals NaN, infinities must be
/// equal; rtol == atol == 0 means exact equality); other dtypes must be equal byte for byte. Returns false
/// with the first difference in `*why` (when given).
bool bundled_tensor_matches(const BundledTensor& expected, const Tensor& actual, double rtol = 1e-5,
                            double atol = 1e-8, std::string* why = nullptr);

}  // namespace etnp::format
