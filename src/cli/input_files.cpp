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

std::vector<format::NamedNpyArray> read_npz(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) usage_error("cannot open '" + shortened(path, 240) + "'");
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return format::parse_npz(bytes, shortened(path, 240));
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
