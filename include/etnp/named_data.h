// Key -> bytes maps: a program's own named data, .ptd files, and their merged view.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "etnp/scalar_type.h"

namespace etnp {

/// dtype, shape and memory order of a tensor stored in a data file.
struct TensorLayout {
  ScalarType dtype = ScalarType::Float;
  std::vector<int64_t> sizes;
  std::vector<uint8_t> dim_order;
  size_t nbytes() const;
};

class NamedDataMap {
 public:
  virtual ~NamedDataMap() = default;
  /// The bytes stored under `key`, or nullopt. The bytes live as long as the map.
  virtual std::optional<std::span<const uint8_t>> get(std::string_view key) const = 0;
  /// The tensor layout stored with `key`, when the file records one.
  virtual std::optional<TensorLayout> layout(std::string_view key) const = 0;
  virtual size_t num_keys() const = 0;
  virtual std::string_view key(size_t index) const = 0;
  /// Where the data comes from, for error messages ("program named data", "weights.ptd", ...).
  virtual std::string describe() const = 0;
};

}  // namespace etnp
