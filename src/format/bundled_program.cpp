#include "format/bundled_program.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "bundled_program_generated.h"
#include "core/printable.h"
#include "etnp/error.h"
#include "etnp/tensor.h"
#include "core/half.h"

namespace etnp::format {

namespace bp = ::bundled_program_flatbuffer;

namespace {

constexpr size_t kAlignment = 16;  // FlatBuffers scalars need natural alignment; 16 covers them all

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorKind::ProgramLoadError, "invalid bundled program: " + what);
}

/// A 16-byte-aligned private copy of `bytes`.
std::shared_ptr<const void> aligned_copy(std::span<const uint8_t> bytes, const uint8_t** data) {
  auto storage = std::make_shared<std::vector<uint8_t>>(bytes.size() + kAlignment);
  const auto base = reinterpret_cast<uintptr_t>(storage->data());
  const size_t pad = (kAlignment - base % kAlignment) % kAlignment;
  if (!bytes.empty()) std::memcpy(storage->data() + pad, bytes.data(), bytes.size());
  *data = storage->data() + pad;
  return storage;
}

BundledTensor decode_tensor(const bp::Tensor& t, const std::string& where) {
  BundledTensor out;
  const int dtype = static_cast<int>(t.scalar_type());
  if (!is_valid_scalar_type(dtype) || element_size(static_cast<ScalarType>(dtype)) == 0)
    fail(where + ": unsupported scalar type " + std::to_string(dtype));
  out.dtype = static_cast<ScalarType>(dtype);

  const size_t rank = t.sizes() ? t.sizes()->size() : 0;
  if (rank > static_cast<size_t>(kMaxTensorRank))
    fail(where + ": rank " + std::to_string(rank) + " exceeds " + std::to_string(kMaxTensorRank));
  // The product of the sizes with zeros counted as 1 bounds the element count and every stride, which a zero
  // dim beside huge ones would overflow while holding no elements (found by fuzz_bpte).
  int64_t numel = 1, span = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int32_t s = t.sizes()->Get(static_cast<flatbuffers::uoffset_t>(d));
    if (s < 0) fail(where + ": negative size " + std::to_string(s) + " in dim " + std::to_string(d));
    out.sizes.push_back(s);
    if (s != 0 && span > std::numeric_limits<int64_t>::max() / s) fail(where + ": element count overflows");
    span *= s == 0 ? 1 : s;
    numel *= s;
  }

  const size_t order_len = t.dim_order() ? t.dim_order()->size() : 0;
  if (order_len == 0) {
    for (size_t d = 0; d < rank; ++d) out.dim_order.push_back(static_cast<uint8_t>(d));
  } else {
    if (order_len != rank)
      fail(where + ": dim_order has " + std::to_string(order_len) + " entries for rank " + std::to_string(rank));
    bool seen[kMaxTensorRank] = {};
    for (size_t d = 0; d < rank; ++d) {
      const uint8_t v = t.dim_order()->Get(static_cast<flatbuffers::uoffset_t>(d));
      if (v >= rank || seen[v]) fail(where + ": dim_order is not a permutation of 0.." + std::to_string(rank - 1));
      seen[v] = true;
      out.dim_order.push_back(v);
    }
  }

  const size_t es = element_size(out.dtype);
  if (static_cast<uint64_t>(numel) > std::numeric_limits<uint64_t>::max() / es) fail(where + ": byte size overflows");
  const uint64_t nbytes = static_cast<uint64_t>(numel) * es;
  const size_t have = t.data() ? t.data()->size() : 0;
  if (have != nbytes)
    fail(where + ": tensor data has " + std::to_string(have) + " bytes, its shape needs " + std::to_string(nbytes));
  if (t.data()) out.data = std::span<const uint8_t>(t.data()->data(), t.data()->size());
  return out;
}

BundledValue decode_value(const bp::Value* v, const std::string& where) {
  if (v == nullptr) fail(where + ": missing value");
  BundledValue out;
  switch (v->val_type()) {
    case bp::ValueUnion::Tensor:
      if (!v->val_as_Tensor()) fail(where + ": missing tensor");
      out.kind = BundledValue::Kind::Tensor;
      out.tensor = decode_tensor(*v->val_as_Tensor(), where);
      break;
    case bp::ValueUnion::Int:
      if (!v->val_as_Int()) fail(where + ": missing int");
      out.kind = BundledValue::Kind::Int;
      out.int_value = v->val_as_Int()->int_val();
      break;
    case bp::ValueUnion::Bool:
      if (!v->val_as_Bool()) fail(where + ": missing bool");
      out.kind = BundledValue::Kind::Bool;
      out.bool_value = v->val_as_Bool()->bool_val();
      break;
    case bp::ValueUnion::Double:
      if (!v->val_as_Double()) fail(where + ": missing double");
      out.kind = BundledValue::Kind::Double;
      out.double_value = v->val_as_Double()->double_val();
      break;
    default:
      fail(where + ": unknown value type " + std::to_string(static_cast<int>(v->val_type())));
  }
  return out;
}

std::vector<BundledValue> decode_values(const flatbuffers::Vector<flatbuffers::Offset<bp::Value>>* values,
                                        const std::string& where) {
  std::vector<BundledValue> out;
  if (values == nullptr) return out;
  out.reserve(values->size());
  for (flatbuffers::uoffset_t i = 0; i < values->size(); ++i)
    out.push_back(decode_value(values->Get(i), where + " " + std::to_string(i)));
  return out;
}

}  // namespace

int64_t BundledTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Tensor BundledTensor::view() const {
  return Tensor(dtype, sizes, dim_order, const_cast<uint8_t*>(data.data()));
}

namespace {

double element_as_double(ScalarType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case ScalarType::Float: { float v; std::memcpy(&v, p + i * 4, 4); return v; }
    case ScalarType::Double: { double v; std::memcpy(&v, p + i * 8, 8); return v; }
    case ScalarType::Half: { uint16_t v; std::memcpy(&v, p + i * 2, 2); return Half::to_float(v); }
    case ScalarType::BFloat16: {
      BFloat16 v;
      std::memcpy(&v.bits, p + i * 2, 2);
      return static_cast<float>(v);
    }
    default: return 0;
  }
}

}  // namespace

bool bundled_tensor_matches(const BundledTensor& expected, const Tensor& actual, double rtol, double atol,
                            std::string* why) {
  auto mismatch = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (actual.dtype() != expected.dtype) {
    return mismatch(std::string("dtype ") + std::string(scalar_type_name(actual.dtype())) + ", expected " +
                    std::string(scalar_type_name(expected.dtype)));
  }
  if (!std::equal(actual.sizes().begin(), actual.sizes().end(), expected.sizes.begin(), expected.sizes.end()))
    return mismatch("shape differs from the expected one");
  int64_t expected_strides[kMaxTensorRank] = {};
  strides_from_dim_order(expected.sizes, expected.dim_order,
                         std::span<int64_t>(expected_strides, expected.sizes.size()));
  for (size_t d = 0; d < expected.sizes.size(); ++d) {
    if (actual.stride(static_cast<int>(d)) != expected_strides[d]) return mismatch("memory layout (strides) differs");
  }
  const size_t nbytes = expected.data.size();
  if (nbytes == 0) return true;
  const auto* got = static_cast<const uint8_t*>(actual.data());
  const ScalarType t = expected.dtype;
  const bool floating =
      t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::Half || t == ScalarType::BFloat16;
  if (!floating || (rtol == 0 && atol == 0)) {
    if (floating) {
      // exact equality, with NaN equal to NaN
      for (int64_t i = 0; i < expected.numel(); ++i) {
        const double a = element_as_double(t, got, i), e = element_as_double(t, expected.data.data(), i);
        if (!(a == e || (std::isnan(a) && std::isnan(e))))
          return mismatch("element " + std::to_string(i) + " is " + std::to_string(a) + ", expected " +
                          std::to_string(e));
      }
      return true;
    }
    if (std::memcmp(got, expected.data.data(), nbytes) != 0) return mismatch("data differs");
    return true;
  }
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double a = element_as_double(t, got, i), e = element_as_double(t, expected.data.data(), i);
    if (std::isnan(a) || std::isnan(e)) {
      if (std::isnan(a) && std::isnan(e)) continue;
    } else if (std::isinf(a) || std::isinf(e)) {
      if (a == e) continue;
    } else if (std::fabs(a - e) <= atol + rtol * std::fabs(e)) {
      continue;
    }
    return mismatch("element " + std::to_string(i) + " is " + std::to_string(a) + ", expected " + std::to_string(e));
  }
  return true;
}

bool BundledProgram::is_bundled_program(std::span<const uint8_t> bytes) {
  return bytes.size() >= 8 && std::memcmp(bytes.data() + 4, bp::BundledProgramIdentifier(), 4) == 0;
}

BundledProgram BundledProgram::parse(std::span<const uint8_t> bytes, std::shared_ptr<const void> keep_alive) {
  if (bytes.size() < 8) fail("file is " + std::to_string(bytes.size()) + " bytes, too short for a FlatBuffer");
  if (!is_bundled_program(bytes)) {
    fail("identifier is '" + printable(bytes.subspan(4, 4)) + "', expected '" +
         bp::BundledProgramIdentifier() + "'");
  }
  // FlatBuffers uoffset_t sizes: larger buffers cannot be addressed (and the verifier refuses them).
  if (bytes.size() >= FLATBUFFERS_MAX_BUFFER_SIZE) fail("file is too large");

  BundledProgram result;
  const uint8_t* data = bytes.data();
  if (reinterpret_cast<uintptr_t>(data) % kAlignment != 0) {
    result.keep_alive_ = aligned_copy(bytes, &data);
  } else {
    result.keep_alive_ = std::move(keep_alive);
  }

  flatbuffers::Verifier verifier(data, bytes.size());
  if (!bp::VerifyBundledProgramBuffer(verifier)) fail("FlatBuffer verification failed (truncated or corrupt)");
  const bp::BundledProgram* root = bp::GetBundledProgram(data);

  result.version_ = root->version();
  if (root->program() == nullptr || root->program()->size() == 0) fail("no embedded program");
  result.program_ = std::span<const uint8_t>(root->program()->data(), root->program()->size());

  if (const auto* suites = root->method_test_suites()) {
    for (flatbuffers::uoffset_t s = 0; s < suites->size(); ++s) {
      const bp::BundledMethodTestSuite* suite = suites->Get(s);
      if (suite == nullptr || suite->method_name() == nullptr)
        fail("test suite " + std::to_string(s) + " has no method name");
      BundledMethodTests tests;
      tests.method_name = suite->method_name()->str();
      if (const auto* cases = suite->test_cases()) {
        for (flatbuffers::uoffset_t c = 0; c < cases->size(); ++c) {
          const bp::BundledMethodTestCase* tc = cases->Get(c);
          const std::string where = "method " + quoted_name(tests.method_name) + " test case " + std::to_string(c);
          if (tc == nullptr) fail(where + " is missing");
          BundledTestCase decoded;
          decoded.inputs = decode_values(tc->inputs(), where + " input");
          decoded.expected_outputs = decode_values(tc->expected_outputs(), where + " expected output");
          tests.test_cases.push_back(std::move(decoded));
        }
      }
      result.suites_.push_back(std::move(tests));
    }
  }
  return result;
}

BundledProgram BundledProgram::load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(ErrorKind::ProgramLoadError, "cannot open bundled program '" + path + "'");
  const std::streamoff size = in.tellg();
  if (size < 0) throw Error(ErrorKind::ProgramLoadError, "cannot read bundled program '" + path + "'");
  in.seekg(0);
  auto storage = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(storage->data()), size))
    throw Error(ErrorKind::ProgramLoadError, "cannot read bundled program '" + path + "'");
  std::span<const uint8_t> bytes(storage->data(), storage->size());
  try {
    return parse(bytes, storage);
  } catch (const Error& e) {
    throw Error(e.kind(), path + ": " + e.detail());
  }
}

const BundledMethodTests* BundledProgram::find_method(std::string_view method) const {
  for (const auto& s : suites_)
    if (s.method_name == method) return &s;
  return nullptr;
}

}  // namespace etnp::format
