#include "format/npy.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/printable.h"
#include "etnp/error.h"

namespace etnp::format {
namespace {

struct DescrRow {
  const char* descr;  // without the byte-order character
  ScalarType type;
};

constexpr DescrRow kDescrs[] = {
    {"f4", ScalarType::Float},  {"f8", ScalarType::Double}, {"f2", ScalarType::Half},   {"i8", ScalarType::Long},
    {"i4", ScalarType::Int},    {"i2", ScalarType::Short},  {"i1", ScalarType::Char},   {"u1", ScalarType::Byte},
    {"b1", ScalarType::Bool},   {"u2", ScalarType::UInt16}, {"u4", ScalarType::UInt32}, {"u8", ScalarType::UInt64},
};

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, "'" + name + "' is not a usable .npy file: " + what);
}

std::string dict_value(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return {};
  size_t p = header.find(':', k);
  if (p == std::string::npos) return {};
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p >= header.size()) return {};
  if (header[p] == '\'') {
    const size_t e = header.find('\'', p + 1);
    return e == std::string::npos ? std::string() : header.substr(p + 1, e - p - 1);
  }
  if (header[p] == '(') {
    const size_t e = header.find(')', p);
    return e == std::string::npos ? std::string() : header.substr(p, e - p + 1);
  }
  size_t e = p;
  while (e < header.size() && header[e] != ',' && header[e] != '}') ++e;
  return header.substr(p, e - p);
}

// Header text for a message: trailing padding dropped, at most 80 bytes.
std::string short_text(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return printable(s);
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

NpyArray parse_npy(const std::vector<uint8_t>& bytes, const std::string& name) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) fail(name, "missing the \\x93NUMPY magic");
  const uint8_t major = bytes[6];
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = bytes[8] | (size_t(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(name, "truncated header");
    header_len = bytes[8] | (size_t(bytes[9]) << 8) | (size_t(bytes[10]) << 16) | (size_t(bytes[11]) << 24);
    offset = 12;
  } else {
    fail(name, "unknown format version " + std::to_string(major));
  }
  if (offset + header_len > bytes.size()) fail(name, "truncated header");
  const std::string header(reinterpret_cast<const char*>(bytes.data() + offset), header_len);
  const std::string descr = dict_value(header, "descr");
  const std::string fortran = dict_value(header, "fortran_order");
  const std::string shape_text = dict_value(header, "shape");
  if (descr.find('O') != std::string::npos) {
    fail(name, "unsupported dtype '" + short_text(descr) + "': object arrays (pickled Python objects) are not "
               "supported; save a numeric array");
  }
  if (descr.size() < 3 || shape_text.empty()) fail(name, "cannot read the header '" + short_text(header) + "'");
  if (descr[0] == '>') fail(name, "big-endian data ('" + descr + "') is not supported; use little-endian");
  NpyArray a;
  bool found = false;
  for (const auto& row : kDescrs) {
    if (descr.substr(1) == row.descr) {
      a.dtype = row.type;
      found = true;
    }
  }
  if (!found) fail(name, "unsupported dtype '" + short_text(descr) + "'");
  // shape like (2, 3) or (4,) or ()
  size_t p = 1;
  while (p < shape_text.size()) {
    while (p < shape_text.size() && (shape_text[p] == ' ' || shape_text[p] == ',')) ++p;
    if (p >= shape_text.size() || shape_text[p] == ')') break;
    size_t e = p;
    while (e < shape_text.size() && std::isdigit(static_cast<unsigned char>(shape_text[e]))) ++e;
    if (e == p || e - p > 18) fail(name, "bad shape '" + short_text(shape_text) + "'");
    int64_t dim = 0;
    for (size_t i = p; i < e; ++i) dim = dim * 10 + (shape_text[i] - '0');
    a.shape.push_back(dim);
    p = e;
  }
  const size_t elem = element_size(a.dtype);
  uint64_t nbytes = elem;
  for (int64_t s : a.shape) {
    if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(s), &nbytes)) fail(name, "shape overflows");
  }
  const size_t data_offset = offset + header_len;
  if (bytes.size() - data_offset < nbytes) {
    fail(name, "truncated data: " + std::to_string(nbytes) + " bytes expected, " +
                   std::to_string(bytes.size() - data_offset) + " present");
  }
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_offset),
                bytes.begin() + static_cast<std::ptrdiff_t>(data_offset + nbytes));
  if (fortran.find("True") != std::string::npos && a.shape.size() > 1) {
    // Column-major -> row-major.
    std::vector<uint8_t> c(a.data.size());
    const size_t rank = a.shape.size();
    const int64_t n = a.numel();
    std::vector<int64_t> idx(rank, 0);
    for (int64_t linear_c = 0; linear_c < n; ++linear_c) {
      int64_t f = 0, stride = 1;
      for (size_t d = 0; d < rank; ++d) {
        f += idx[d] * stride;
        stride *= a.shape[d];
      }
      std::memcpy(c.data() + linear_c * elem, a.data.data() + f * elem, elem);
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < a.shape[d]) break;
        idx[d] = 0;
      }
    }
    a.data.swap(c);
  }
  return a;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::InvalidArgument, "cannot open input file '" + path + "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_npy(bytes, path);
}

namespace {

// The header of a version 1.0 .npy: `dict`, padded so that the data starts on a 64-byte boundary, ending in '\n'.
std::vector<uint8_t> npy_header(std::string dict) {
  const size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.push_back(static_cast<uint8_t>(dict.size() & 0xff));
  out.push_back(static_cast<uint8_t>(dict.size() >> 8));
  out.insert(out.end(), dict.begin(), dict.end());
  return out;
}

}  // namespace

std::vector<uint8_t> encode_npy(ScalarType dtype, const std::vector<int64_t>& shape, const void* data) {
  const char* descr = nullptr;
  ScalarType stored = dtype == ScalarType::BFloat16 ? ScalarType::UInt16 : dtype;
  for (const auto& row : kDescrs) {
    if (row.type == stored) descr = row.descr;
  }
  if (descr == nullptr) {
    throw Error(ErrorKind::InvalidArgument, "cannot write dtype " + std::string(scalar_type_name(dtype)) + " to .npy");
  }
  const char order = element_size(stored) == 1 ? '|' : '<';
  std::string shape_text = "(";
  for (size_t i = 0; i < shape.size(); ++i) shape_text += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  shape_text += ")";
  std::vector<uint8_t> out = npy_header("{'descr': '" + std::string(1, order) + descr +
                                        "', 'fortran_order': False, 'shape': " + shape_text + ", }");
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  const auto* p = static_cast<const uint8_t*>(data);
  if (n > 0) out.insert(out.end(), p, p + n * static_cast<int64_t>(element_size(dtype)));
  return out;
}

namespace {

// UTF-8 -> code points; a byte that does not start a valid sequence reads as U+FFFD.
std::vector<uint32_t> code_points(const std::string& text) {
  std::vector<uint32_t> out;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (s[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
    out.push_back(ok ? cp : 0xFFFD);
    i += ok ? len : 1;
  }
  return out;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error(ErrorKind::InvalidArgument, "cannot write '" + path + "'");
}

}  // namespace

std::vector<uint8_t> encode_npy_string(const std::string& utf8) {
  const std::vector<uint32_t> cps = code_points(utf8);
  // numpy gives an empty string the dtype '<U1' (one NUL code point).
  const size_t width = cps.empty() ? 1 : cps.size();
  std::vector<uint8_t> out = npy_header("{'descr': '<U" + std::to_string(width) + "', 'fortran_order': False, 'shape': (), }");
  for (size_t i = 0; i < width; ++i) {
    const uint32_t cp = i < cps.size() ? cps[i] : 0;
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<uint8_t>(cp >> (8 * b)));  // UTF-32LE
  }
  return out;
}

void write_npy_string(const std::string& path, const std::string& utf8) { write_bytes(path, encode_npy_string(utf8)); }

void write_npy(const std::string& path, ScalarType dtype, const std::vector<int64_t>& shape, const void* data) {
  const auto bytes = encode_npy(dtype, shape, data);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error(ErrorKind::InvalidArgument, "cannot write '" + path + "'");
}

}  // namespace etnp::format

namespace etnp::format {
namespace {

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint64_t le64(const uint8_t* p) { return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32); }

// [offset, offset + length) lies inside `size` bytes (without overflowing).
bool fits(uint64_t offset, uint64_t length, size_t size) { return offset <= size && length <= size - offset; }

// "arr_12" -> 12; -1 for any other name.
int64_t arr_number(const std::string& name) {
  if (name.size() < 5 || name.size() > 16 || name.compare(0, 4, "arr_") != 0) return -1;
  int64_t n = 0;
  for (size_t i = 4; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

}  // namespace

std::vector<NamedNpyArray> parse_npz(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string shown = "'" + name + "'";
  auto bad = [&](const std::string& why) {
    throw Error(ErrorKind::InvalidArgument, shown + " is not a usable .npz archive: " + why);
  };
  const size_t size = bytes.size();
  // The end-of-central-directory record: the last "PK\5\6" with room for its 22 bytes (and a comment of up
  // to 64 KiB after it).
  if (size < 22) bad("too short for a zip archive");
  size_t eocd = std::string::npos;
  for (size_t p = size - 22 + 1; p-- > 0 && size - p <= 22 + 65535;) {
    if (le32(&bytes[p]) == 0x06054b50) {
      eocd = p;
      break;
    }
  }
  if (eocd == std::string::npos) bad("no zip directory (numpy.savez writes .npz files)");
  uint64_t entries = le16(&bytes[eocd + 10]);
  uint64_t dir_offset = le32(&bytes[eocd + 16]);
  if (dir_offset == 0xFFFFFFFFu || entries == 0xFFFF) {
    // Zip64: the locator sits just before the record and points at the zip64 end record.
    if (eocd < 20 || le32(&bytes[eocd - 20]) != 0x07064b50) bad("a zip64 archive without its locator");
    const uint64_t record = le64(&bytes[eocd - 20 + 8]);
    if (!fits(record, 56, size) || le32(&bytes[record]) != 0x06064b50) bad("a damaged zip64 directory record");
    entries = le64(&bytes[record + 32]);
    dir_offset = le64(&bytes[record + 48]);
  }
  std::vector<NamedNpyArray> arrays;
  uint64_t p = dir_offset;
  for (uint64_t e = 0; e < entries; ++e) {
    if (!fits(p, 46, size) || le32(&bytes[p]) != 0x02014b50) bad("a damaged zip directory");
    const uint16_t method = le16(&bytes[p + 10]);
    uint64_t csize = le32(&bytes[p + 20]), usize = le32(&bytes[p + 24]);
    const uint16_t name_len = le16(&bytes[p + 28]), extra_len = le16(&bytes[p + 30]), comment_len = le16(&bytes[p + 32]);
    uint64_t local = le32(&bytes[p + 42]);
    if (!fits(p + 46, uint64_t{name_len} + extra_len, size)) bad("a damaged zip directory");
    std::string entry(reinterpret_cast<const char*>(&bytes[p + 46]), name_len);
    // Zip64 sizes and offset, in that order, for the fields that are 0xFFFFFFFF.
    const uint64_t extra_end = p + 46 + name_len + extra_len;
    for (uint64_t x = p + 46 + name_len; x + 4 <= extra_end;) {
      const uint16_t id = le16(&bytes[x]), len = le16(&bytes[x + 2]);
      if (id == 0x0001) {
        uint64_t q = x + 4;
        const uint64_t end = std::min<uint64_t>(x + 4 + len, extra_end);
        if (usize == 0xFFFFFFFFu && q + 8 <= end) { usize = le64(&bytes[q]); q += 8; }
        if (csize == 0xFFFFFFFFu && q + 8 <= end) { csize = le64(&bytes[q]); q += 8; }
        if (local == 0xFFFFFFFFu && q + 8 <= end) { local = le64(&bytes[q]); q += 8; }
      }
      x += 4 + len;
    }
    p = extra_end + comment_len;
    if (!entry.empty() && entry.back() == '/') continue;  // a folder entry
    if (method != 0) {
      bad("entry '" + short_text(entry) + "' is compressed (numpy.savez_compressed); etnp reads uncompressed "
          "archives: write it with numpy.savez");
    }
    if (!fits(local, 30, size) || le32(&bytes[local]) != 0x04034b50) bad("a damaged entry '" + short_text(entry) + "'");
    const uint64_t data = local + 30 + le16(&bytes[local + 26]) + le16(&bytes[local + 28]);
    if (!fits(data, usize, size) || csize != usize) bad("entry '" + short_text(entry) + "' is truncated");
    const std::vector<uint8_t> npy(bytes.begin() + static_cast<std::ptrdiff_t>(data),
                                   bytes.begin() + static_cast<std::ptrdiff_t>(data + usize));
    if (entry.size() > 4 && entry.ends_with(".npy")) entry.resize(entry.size() - 4);
    arrays.push_back({entry, std::make_shared<NpyArray>(parse_npy(npy, name + ":" + entry))});
  }
  if (arrays.empty()) bad("it holds no arrays");
  // numpy.savez(f, a, b) names them arr_0, arr_1, ...: in number order. Other names keep the archive's order.
  bool all_numbered = true;
  for (const auto& a : arrays) all_numbered = all_numbered && arr_number(a.name) >= 0;
  if (all_numbered) {
    std::stable_sort(arrays.begin(), arrays.end(), [](const NamedNpyArray& a, const NamedNpyArray& b) {
      return arr_number(a.name) < arr_number(b.name);
    });
  }
  return arrays;
}

}  // namespace etnp::format
