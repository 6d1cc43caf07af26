// Inputs and expectations given as files: a .npy, a .npz archive (numpy.savez) or a directory of .npy files.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>

#include "cli/cli.h"

namespace etnp::cli {
namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

uint32_t le32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint64_t le64(const uint8_t* p) { return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32); }

// "arr_12" -> 12; -1 for any other name.
int64_t arr_number(const std::string& name) {
  if (name.size() < 5 || name.compare(0, 4, "arr_") != 0) return -1;
  int64_t n = 0;
  for (size_t i = 4; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i])) || i - 4 > 12) return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])), db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      na.erase(0, std::min(na.find_first_not_of('0'), na.size()));
      nb.erase(0, std::min(nb.find_first_not_of('0'), nb.size()));
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  if ((a.size() - i) != (b.size() - j)) return a.size() - i < b.size() - j;
  return a < b;
}

std::vector<std::string> directory_entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) usage_error("cannot read the directory '" + shortened(dir, 240) + "': " + std::strerror(errno));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != ".." && name[0] != '.') names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end(), natural_less);
  return names;
}

std::vector<NamedArray> read_npz(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) usage_error("cannot open '" + shortened(path, 240) + "'");
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string shown = "'" + shortened(path, 240) + "'";
  auto bad = [&](const std::string& why) { usage_error(shown + " is not a usable .npz archive: " + why); };
  // The end-of-central-directory record: the last "PK\5\6" with room for its 22 bytes.
  if (bytes.size() < 22) bad("too short for a zip archive");
  size_t eocd = std::string::npos;
  for (size_t p = bytes.size() - 22 + 1; p-- > 0 && bytes.size() - p <= 22 + 65535;) {
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
    const uint64_t rec = le64(&bytes[eocd - 20 + 8]);
    if (rec + 56 > bytes.size() || le32(&bytes[rec]) != 0x06064b50) bad("a damaged zip64 directory record");
    entries = le64(&bytes[rec + 32]);
    dir_offset = le64(&bytes[rec + 48]);
  }
  std::vector<NamedArray> arrays;
  size_t p = dir_offset;
  for (uint64_t e = 0; e < entries; ++e) {
    if (p + 46 > bytes.size() || le32(&bytes[p]) != 0x02014b50) bad("a damaged zip directory");
    const uint16_t method = le16(&bytes[p + 10]);
    uint64_t csize = le32(&bytes[p + 20]), usize = le32(&bytes[p + 24]);
    const uint16_t name_len = le16(&bytes[p + 28]), extra_len = le16(&bytes[p + 30]), comment_len = le16(&bytes[p + 32]);
    uint64_t local = le32(&bytes[p + 42]);
    if (p + 46 + name_len + extra_len > bytes.size()) bad("a damaged zip directory");
    std::string name(reinterpret_cast<const char*>(&bytes[p + 46]), name_len);
    // Zip64 sizes and offset, in that order, for the fields that are 0xFFFFFFFF.
    for (size_t x = p + 46 + name_len; x + 4 <= p + 46 + name_len + extra_len;) {
      const uint16_t id = le16(&bytes[x]), len = le16(&bytes[x + 2]);
      if (id == 0x0001) {
        size_t q = x + 4;
        if (usize == 0xFFFFFFFFu && q + 8 <= x + 4 + len) { usize = le64(&bytes[q]); q += 8; }
        if (csize == 0xFFFFFFFFu && q + 8 <= x + 4 + len) { csize = le64(&bytes[q]); q += 8; }
        if (local == 0xFFFFFFFFu && q + 8 <= x + 4 + len) { local = le64(&bytes[q]); q += 8; }
      }
      x += 4 + len;
    }
    p += 46 + name_len + extra_len + comment_len;
    if (!name.empty() && name.back() == '/') continue;  // a folder entry
    if (method != 0) {
      bad("entry '" + shortened(name) + "' is compressed (numpy.savez_compressed); etnp reads uncompressed "
          "archives: write it with numpy.savez");
    }
    if (local + 30 > bytes.size() || le32(&bytes[local]) != 0x04034b50) bad("a damaged entry '" + shortened(name) + "'");
    const uint64_t data = local + 30 + le16(&bytes[local + 26]) + le16(&bytes[local + 28]);
    if (data + usize > bytes.size() || csize != usize) bad("entry '" + shortened(name) + "' is truncated");
    const std::vector<uint8_t> npy(bytes.begin() + static_cast<std::ptrdiff_t>(data),
                                   bytes.begin() + static_cast<std::ptrdiff_t>(data + usize));
    if (name.size() > 4 && name.ends_with(".npy")) name.resize(name.size() - 4);
    arrays.push_back({name, std::make_shared<format::NpyArray>(format::parse_npy(npy, shortened(path, 240) + ":" + name))});
  }
  if (arrays.empty()) bad("it holds no arrays");
  // numpy.savez(f, a, b) names them arr_0, arr_1, ...: in number order. Other names keep the archive's order.
  bool all_numbered = true;
  for (const auto& a : arrays) all_numbered = all_numbered && arr_number(a.name) >= 0;
  if (all_numbered) {
    std::stable_sort(arrays.begin(), arrays.end(),
                     [](const NamedArray& a, const NamedArray& b) { return arr_number(a.name) < arr_number(b.name); });
  }
  return arrays;
}

std::vector<InputSpec> expand_input_specs(const std::vector<std::string>& specs, const std::string& flag) {
  std::vector<InputSpec> out;
  for (const auto& s : specs) {
    if (s.size() > 4 && s.ends_with(".npz") && !is_directory(s)) {
      for (auto& a : read_npz(s)) out.push_back({s + ":" + a.name, std::move(a.array)});
    } else if (is_directory(s)) {
      size_t before = out.size();
      for (const auto& name : directory_entries(s)) {
        if (name.size() > 4 && name.ends_with(".npy")) out.push_back({s + "/" + name, nullptr});
      }
      if (out.size() == before) usage_error(flag + " '" + shortened(s, 240) + "' is a directory without .npy files");
    } else {
      out.push_back({s, nullptr});
    }
  }
  return out;
}

}  // namespace etnp::cli
