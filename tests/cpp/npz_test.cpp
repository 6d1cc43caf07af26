// format::parse_npz on archives written here the way numpy.savez writes them (stored zip entries), and on
// every truncation and on corrupted sizes and offsets: a precise InvalidArgument each, never a read outside
// the bytes (the ASan run checks that).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "etnp/error.h"
#include "format/npy.h"

namespace etnp::format {
namespace {

void put16(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back(static_cast<uint8_t>(v));
  b.push_back(static_cast<uint8_t>(v >> 8));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  put16(b, v & 0xFFFF);
  put16(b, v >> 16);
}

// A zip of stored entries (name, bytes), with the byte offset of each central directory record.
struct Zip {
  std::vector<uint8_t> bytes;
  std::vector<size_t> records;
  size_t eocd = 0;
};

Zip stored_zip(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& entries) {
  Zip z;
  std::vector<size_t> locals;
  for (const auto& [name, data] : entries) {
    locals.push_back(z.bytes.size());
    put32(z.bytes, 0x04034b50);
    put16(z.bytes, 20);  // version
    put16(z.bytes, 0);   // flags
    put16(z.bytes, 0);   // stored
    put32(z.bytes, 0);   // time, date
    put32(z.bytes, 0);   // crc (not checked)
    put32(z.bytes, static_cast<uint32_t>(data.size()));
    put32(z.bytes, static_cast<uint32_t>(data.size()));
    put16(z.bytes, static_cast<uint32_t>(name.size()));
    put16(z.bytes, 0);
    z.bytes.insert(z.bytes.end(), name.begin(), name.end());
    z.bytes.insert(z.bytes.end(), data.begin(), data.end());
  }
  const size_t dir = z.bytes.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [name, data] = entries[i];
    z.records.push_back(z.bytes.size());
    put32(z.bytes, 0x02014b50);
    put16(z.bytes, 20);
    put16(z.bytes, 20);
    put16(z.bytes, 0);
    put16(z.bytes, 0);  // method at +10
    put32(z.bytes, 0);
    put32(z.bytes, 0);
    put32(z.bytes, static_cast<uint32_t>(data.size()));  // +20
    put32(z.bytes, static_cast<uint32_t>(data.size()));  // +24
    put16(z.bytes, static_cast<uint32_t>(name.size()));  // +28
    put16(z.bytes, 0);
    put16(z.bytes, 0);
    put16(z.bytes, 0);
    put16(z.bytes, 0);
    put32(z.bytes, 0);
    put32(z.bytes, static_cast<uint32_t>(locals[i]));  // +42
    z.bytes.insert(z.bytes.end(), name.begin(), name.end());
  }
  z.eocd = z.bytes.size();
  put32(z.bytes, 0x06054b50);
  put32(z.bytes, 0);
  put16(z.bytes, static_cast<uint32_t>(entries.size()));
  put16(z.bytes, static_cast<uint32_t>(entries.size()));  // +10
  put32(z.bytes, static_cast<uint32_t>(z.bytes.size() - 12 - dir));
  put32(z.bytes, static_cast<uint32_t>(dir));  // +16
  put16(z.bytes, 0);
  return z;
}

std::vector<uint8_t> npy_of(std::vector<float> values) {
  return encode_npy(ScalarType::Float, {static_cast<int64_t>(values.size())}, values.data());
}

Zip two_arrays() { return stored_zip({{"arr_1.npy", npy_of({3, 4})}, {"arr_0.npy", npy_of({1, 2, 5})}}); }

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse_npz(bytes, "in.npz");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

void set32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

TEST(Npz, ReadsStoredEntriesInArrNumberOrder) {
  const auto arrays = parse_npz(two_arrays().bytes, "in.npz");
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].name, "arr_0");
  EXPECT_EQ(arrays[0].array->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(arrays[1].name, "arr_1");
  float v[2];
  std::memcpy(v, arrays[1].array->data.data(), sizeof v);
  EXPECT_EQ(v[0], 3.0f);
  EXPECT_EQ(v[1], 4.0f);
}

TEST(Npz, OtherNamesKeepTheArchiveOrder) {
  const auto arrays = parse_npz(stored_zip({{"y.npy", npy_of({1})}, {"x.npy", npy_of({2})}}).bytes, "kw.npz");
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].name, "y");
  EXPECT_EQ(arrays[1].name, "x");
}

TEST(Npz, EveryTruncationIsAPreciseError) {
  const std::vector<uint8_t> whole = two_arrays().bytes;
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string message = error_of(std::vector<uint8_t>(whole.begin(), whole.begin() + n));
    EXPECT_EQ(message.rfind("'in.npz' is not a usable .npz archive: ", 0), 0u) << n << ": " << message;
  }
}

TEST(Npz, CorruptedSizesAndOffsetsAreErrorsNotReads) {
  const Zip z = two_arrays();
  struct Case {
    size_t at;
    uint32_t value;
    const char* says;
  };
  const size_t r0 = z.records[0];
  const Case cases[] = {
      {r0 + 24, 0xFFFFFFF0u, "entry 'arr_1.npy' is truncated"},  // uncompressed size past the end
      {r0 + 20, 7, "entry 'arr_1.npy' is truncated"},            // sizes that disagree
      {r0 + 42, 0xFFFFFFF0u, "a damaged entry 'arr_1.npy'"},     // local header far past the end
      {z.eocd + 16, 0xFFFFFF00u, "a damaged zip directory"},     // directory offset past the end
      {z.eocd + 16, 0xFFFFFFFFu, "a zip64 archive without its locator"},
      {r0 + 10, 8, "entry 'arr_1.npy' is compressed"},           // deflate
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> bytes = z.bytes;
    if (c.at == r0 + 10) {
      bytes[c.at] = static_cast<uint8_t>(c.value);
    } else {
      set32(bytes, c.at, c.value);
    }
    const std::string message = error_of(bytes);
    EXPECT_NE(message.find(c.says), std::string::npos) << c.at << ": " << message;
  }
  // More directory entries than the directory holds.
  std::vector<uint8_t> bytes = z.bytes;
  bytes[z.eocd + 10] = 9;
  EXPECT_NE(error_of(bytes).find("a damaged zip directory"), std::string::npos);
  // An entry that is not a .npy: parse_npy's error, naming the archive and the entry.
  const std::string not_npy = error_of(stored_zip({{"arr_0.npy", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}}).bytes);
  EXPECT_NE(not_npy.find("in.npz:arr_0"), std::string::npos) << not_npy;
  EXPECT_EQ(error_of(stored_zip({}).bytes), "'in.npz' is not a usable .npz archive: it holds no arrays");
}

}  // namespace
}  // namespace etnp::format
