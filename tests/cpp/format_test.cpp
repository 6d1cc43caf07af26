// The container checks of src/format that need no fixtures: identifiers, headers, .npy, .ptd headers.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "etnp/error.h"
#include "format/byte_source.h"
#include "format/npy.h"
#include "format/ptd_file.h"
#include "format/pte_file.h"

namespace etnp::format {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::string load_error(const std::vector<uint8_t>& bytes) {
  try {
    PteFile::parse(ByteSource::from_buffer(bytes, nullptr, "<test>"), Verification::InternalConsistency);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
    return e.what();
  }
  return "loaded";
}

TEST(PteHeader, OtherSchemaVersionIsNamed) {
  std::vector<uint8_t> b = {16, 0, 0, 0, 'E', 'T', '1', '3', 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(load_error(b),
            "written by an ExecuTorch exporter with schema ET13; this runtime reads ET12 (re-export the model with a "
            "matching ExecuTorch version)");
}

TEST(PteHeader, ZipArchiveIsRecognized) {
  std::string zip = "PK\x03\x04";
  zip += std::string(26, '\0') + "archive/data.pkl";
  EXPECT_NE(load_error(bytes_of(zip)).find("a ZIP archive (starts with 'PK'), laid out like a TorchScript"), std::string::npos);
  EXPECT_EQ(load_error(bytes_of("PK\x05\x06")), "not an ExecuTorch program: a ZIP archive (starts with 'PK')");
}

TEST(PteHeader, TextAndGarbage) {
  EXPECT_EQ(load_error(bytes_of("# a text file\n")),
            "not an ExecuTorch program: plain text (file identifier 'text', not 'ET12')");
  std::vector<uint8_t> garbage = {1, 2, 3, 4, 0xff, 0x00, 'x', 'y', 9, 9};
  EXPECT_EQ(load_error(garbage), "not an ExecuTorch program: file identifier is '\\xff\\x00xy', not 'ET12'");
}

TEST(PteHeader, TooShort) {
  EXPECT_EQ(load_error({}), "not an ExecuTorch program: the file is 0 bytes long, too short for a program header");
  EXPECT_EQ(load_error({8, 0, 0}), "not an ExecuTorch program: the file is 3 bytes long, too short for a program header");
}

TEST(PteHeader, CorruptExtendedHeader) {
  std::vector<uint8_t> b(64, 0);
  b[0] = 48;
  std::memcpy(b.data() + 4, "ET12eh00", 8);
  b[12] = 16;  // header length below 24
  EXPECT_NE(load_error(b).find("length 16 is below the minimum of 24"), std::string::npos);
  b[12] = 32;
  const uint64_t program_size = 4096;  // larger than the file
  std::memcpy(b.data() + 16, &program_size, 8);
  EXPECT_NE(load_error(b).find("truncated file"), std::string::npos);
}

TEST(PteHeader, RootOffsetOutsideTheFile) {
  std::vector<uint8_t> b(32, 0);
  const uint32_t root = 1000;
  std::memcpy(b.data(), &root, 4);
  std::memcpy(b.data() + 4, "ET12", 4);
  EXPECT_NE(load_error(b).find("root table offset 1000"), std::string::npos);
}

TEST(PteHeader, FlatbufferThatDoesNotVerify) {
  std::vector<uint8_t> b(64, 0xee);
  const uint32_t root = 12;
  std::memcpy(b.data(), &root, 4);
  std::memcpy(b.data() + 4, "ET12", 4);
  EXPECT_NE(load_error(b).find("does not verify"), std::string::npos);
}

TEST(Npy, RoundTripsEveryDtype) {
  for (ScalarType t : {ScalarType::Float, ScalarType::Double, ScalarType::Long, ScalarType::Int, ScalarType::Short,
                       ScalarType::Char, ScalarType::Byte, ScalarType::Bool, ScalarType::Half, ScalarType::UInt16}) {
    std::vector<uint8_t> data(6 * element_size(t));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(t == ScalarType::Bool ? i % 2 : i * 7);
    const auto encoded = encode_npy(t, {2, 3}, data.data());
    EXPECT_EQ(encoded.size() % 64, data.size() % 64) << "data starts on a 64-byte boundary";
    const NpyArray a = parse_npy(encoded, "x.npy");
    EXPECT_EQ(a.dtype, t);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a.data, data);
  }
}

TEST(Npy, ZeroDimensionalAndEmpty) {
  const double v = 2.5;
  NpyArray a = parse_npy(encode_npy(ScalarType::Double, {}, &v), "s.npy");
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(a.numel(), 1);
  a = parse_npy(encode_npy(ScalarType::Float, {0, 4}, nullptr), "e.npy");
  EXPECT_EQ(a.numel(), 0);
}

TEST(Npy, RejectsWhatItCannotRead) {
  auto error_of = [](std::vector<uint8_t> b) {
    try {
      parse_npy(b, "bad.npy");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      return std::string(e.what());
    }
    return std::string("parsed");
  };
  EXPECT_NE(error_of(bytes_of("not numpy")).find("magic"), std::string::npos);
  const float f[2] = {1, 2};
  auto good = encode_npy(ScalarType::Float, {2}, f);
  auto truncated = good;
  truncated.resize(truncated.size() - 3);
  EXPECT_NE(error_of(truncated).find("truncated data"), std::string::npos);
  std::string header(reinterpret_cast<const char*>(good.data()), good.size());
  auto big_endian = header;
  big_endian.replace(big_endian.find("<f4"), 3, ">f4");
  EXPECT_NE(error_of(bytes_of(big_endian)).find("big-endian"), std::string::npos);
  auto object = header;
  object.replace(object.find("<f4"), 3, "|O8");
  EXPECT_NE(error_of(bytes_of(object)).find("unsupported dtype"), std::string::npos);
}

TEST(Npy, FortranOrderIsTransposed) {
  // A 2x3 array stored column-major: columns (0,3), (1,4), (2,5).
  const int32_t col_major[6] = {0, 3, 1, 4, 2, 5};
  auto bytes = encode_npy(ScalarType::Int, {2, 3}, col_major);
  std::string s(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  s.replace(s.find("'fortran_order': False"), 22, "'fortran_order': True ");
  const NpyArray a = parse_npy(bytes_of(s), "f.npy");
  const auto* v = reinterpret_cast<const int32_t*>(a.data.data());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v[i], i);
}

TEST(Ptd, RejectsNonPtdBytes) {
  auto error_of = [](const std::vector<uint8_t>& b) {
    try {
      PtdFile::parse(ByteSource::from_buffer(b, nullptr, "w.ptd"));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::ProgramLoadError);
      return std::string(e.what());
    }
    return std::string("parsed");
  };
  EXPECT_NE(error_of(bytes_of("tiny")).find("too short"), std::string::npos);
  std::vector<uint8_t> b(128, 0);
  std::memcpy(b.data() + 4, "ET12", 4);
  EXPECT_NE(error_of(b).find("a .pte program, not .ptd"), std::string::npos);
  std::memcpy(b.data() + 4, "FT01FH01", 8);
  b[12] = 40;
  const uint64_t huge = uint64_t(1) << 40;
  std::memcpy(b.data() + 16, &huge, 8);
  EXPECT_NE(error_of(b).find("truncated"), std::string::npos);
}

}  // namespace
}  // namespace etnp::format
