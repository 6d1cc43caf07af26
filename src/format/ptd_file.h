// External data files (.ptd, FlatTensor "FT01"): current named-data layout and the early-2025 layout.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "etnp/named_data.h"
#include "format/byte_source.h"

namespace etnp::format {

class PtdFile final : public NamedDataMap {
 public:
  /// Parses and verifies a .ptd. Throws ProgramLoadError naming the file and what is wrong.
  static std::unique_ptr<PtdFile> parse(std::shared_ptr<ByteSource> source);

  std::optional<std::span<const uint8_t>> get(std::string_view key) const override;
  std::optional<TensorLayout> layout(std::string_view key) const override;
  size_t num_keys() const override { return entries_.size(); }
  std::string_view key(size_t index) const override { return entries_.at(index).key; }
  std::string describe() const override { return "'" + source_->name() + "'"; }
  const ByteSource& source() const { return *source_; }

 private:
  struct Entry {
    std::string key;
    std::span<const uint8_t> bytes;
    std::optional<TensorLayout> layout;
  };
  const Entry* find(std::string_view key) const;

  std::shared_ptr<ByteSource> source_;
  std::vector<Entry> entries_;
};

/// Several maps searched in order (the caller's .ptd files, then the program's own named data). A key
/// present in two maps is an error, as in the reference runtime.
class MergedDataMap final : public NamedDataMap {
 public:
  explicit MergedDataMap(std::vector<const NamedDataMap*> maps);
  std::optional<std::span<const uint8_t>> get(std::string_view key) const override;
  std::optional<TensorLayout> layout(std::string_view key) const override;
  size_t num_keys() const override;
  std::string_view key(size_t index) const override;
  std::string describe() const override;

 private:
  std::vector<const NamedDataMap*> maps_;
};

}  // namespace etnp::format
