// A FlatBuffers-aware mutator for the .pte targets (LLVMFuzzerCustomMutator): the input is walked through
// the Program schema (flatc --binary --schema program.fbs, read with flatbuffers/reflection.h) and one of the
// places found is changed: a scalar field's value, a vector's or string's length, or an offset to a table,
// vector or string. Bytes keep their positions, so a change lands where the parser reads it. Inputs the
// reflection verifier rejects, and a share of the others, get libFuzzer's own byte mutations.
#include <flatbuffers/reflection.h>
#include <flatbuffers/util.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

enum class Place : uint8_t { Scalar, Length, Offset };

struct Point {
  Place place;
  size_t at;    // byte offset in the buffer
  size_t size;  // bytes of the value (1, 2, 4 or 8)
};

const std::string& schema_bytes() {
  static const std::string bytes = [] {
    std::string s;
    if (!flatbuffers::LoadFile(ETNP_PROGRAM_BFBS, /*binary=*/true, &s)) s.clear();
    return s;
  }();
  return bytes;
}

class Walker {
 public:
  Walker(const reflection::Schema& schema, const uint8_t* base) : schema_(schema), base_(base) {}

  void table(const reflection::Object& object, const flatbuffers::Table& t, int depth) {
    if (depth > 24 || points.size() > 20000) return;
    for (const reflection::Field* field : *object.fields()) {
      const flatbuffers::voffset_t vo = t.GetOptionalFieldOffset(field->offset());
      if (vo == 0) continue;
      const uint8_t* where = reinterpret_cast<const uint8_t*>(&t) + vo;
      const reflection::Type& type = *field->type();
      const reflection::BaseType bt = type.base_type();
      if (flatbuffers::IsScalar(bt)) {
        add(Place::Scalar, where, flatbuffers::GetTypeSize(bt));
      } else if (bt == reflection::String) {
        add(Place::Offset, where, 4);
        add(Place::Length, where + flatbuffers::ReadScalar<uint32_t>(where), 4);
      } else if (bt == reflection::Obj) {
        const reflection::Object& sub = *schema_.objects()->Get(type.index());
        if (sub.is_struct()) {
          add(Place::Scalar, where, 4);
        } else {
          add(Place::Offset, where, 4);
          table(sub, *flatbuffers::GetFieldT(t, *field), depth + 1);
        }
      } else if (bt == reflection::Union) {
        add(Place::Offset, where, 4);
        const reflection::Object* sub = union_object(object, t, *field);
        if (sub != nullptr) table(*sub, *flatbuffers::GetFieldT(t, *field), depth + 1);
      } else if (bt == reflection::Vector) {
        add(Place::Offset, where, 4);
        const auto* vec = flatbuffers::GetFieldAnyV(t, *field);
        add(Place::Length, reinterpret_cast<const uint8_t*>(vec) - 4, 4);
        vector(type, vec, depth);
      }
    }
  }

  std::vector<Point> points;

 private:
  void add(Place place, const uint8_t* at, size_t size) {
    points.push_back({place, static_cast<size_t>(at - base_), size});
  }

  const reflection::Object* union_object(const reflection::Object& object, const flatbuffers::Table& t,
                                         const reflection::Field& field) {
    // The union's type field is the one named "<field>_type" (flatc's convention).
    const auto* type_field = object.fields()->LookupByKey((field.name()->str() + "_type").c_str());
    if (type_field == nullptr) return nullptr;
    const auto tag = flatbuffers::GetFieldI<uint8_t>(t, *type_field);
    const reflection::Enum& e = *schema_.enums()->Get(field.type()->index());
    const reflection::EnumVal* val = e.values()->LookupByKey(tag);
    if (val == nullptr || val->union_type() == nullptr || val->union_type()->base_type() != reflection::Obj)
      return nullptr;
    return schema_.objects()->Get(val->union_type()->index());
  }

  void vector(const reflection::Type& type, const flatbuffers::VectorOfAny* vec, int depth) {
    const reflection::BaseType et = type.element();
    const uint32_t n = std::min<uint32_t>(vec->size(), 256);
    const uint8_t* data = vec->Data();
    if (flatbuffers::IsScalar(et)) {
      const size_t es = flatbuffers::GetTypeSize(et);
      for (uint32_t i = 0; i < n; ++i) add(Place::Scalar, data + i * es, es);
    } else if (et == reflection::String) {
      for (uint32_t i = 0; i < n; ++i) {
        const uint8_t* p = data + i * 4;
        add(Place::Offset, p, 4);
        add(Place::Length, p + flatbuffers::ReadScalar<uint32_t>(p), 4);
      }
    } else if (et == reflection::Obj) {
      const reflection::Object& sub = *schema_.objects()->Get(type.index());
      if (sub.is_struct()) {
        for (uint32_t i = 0; i < n; ++i) add(Place::Scalar, data + i * sub.bytesize(), 4);
        return;
      }
      for (uint32_t i = 0; i < n; ++i) {
        const uint8_t* p = data + i * 4;
        add(Place::Offset, p, 4);
        table(sub, *reinterpret_cast<const flatbuffers::Table*>(p + flatbuffers::ReadScalar<uint32_t>(p)),
              depth + 1);
      }
    }
  }

  const reflection::Schema& schema_;
  const uint8_t* base_;
};

uint64_t new_value(std::mt19937_64& rng, Place place, uint64_t old, size_t size) {
  static constexpr uint64_t kInteresting[] = {0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256,
                                              0x7fff, 0x8000, 0xffff, 0x10000, 0x7fffffff, 0x80000000,
                                              0xffffffff, 0x100000000ull, 0x7fffffffffffffffull,
                                              0x8000000000000000ull, ~0ull};
  switch (rng() % (place == Place::Scalar ? 5 : 4)) {
    case 0: return kInteresting[rng() % std::size(kInteresting)];
    case 1: return old + 1 + rng() % 8;
    case 2: return old - 1 - rng() % 8;
    case 3:
      // Lengths double or halve; offsets move by whole 4-byte words, to land on another field.
      if (place == Place::Length) return rng() % 2 ? old * 2 : old / 2;
      if (place == Place::Offset) return old + 4 * (static_cast<int64_t>(rng() % 33) - 16);
      return old ^ (1ull << (rng() % (8 * size)));
    default: return rng();
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  std::mt19937_64 rng(seed);
  const std::string& bfbs = schema_bytes();
  if (bfbs.empty() || size < 8 || rng() % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
  const reflection::Schema& schema = *reflection::GetSchema(bfbs.data());
  if (!flatbuffers::Verify(schema, *schema.root_table(), data, size)) return LLVMFuzzerMutate(data, size, max_size);

  Walker walker(schema, data);
  walker.table(*schema.root_table(), *flatbuffers::GetAnyRoot(data), 0);
  if (walker.points.empty()) return LLVMFuzzerMutate(data, size, max_size);
  const int changes = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < changes; ++i) {
    const Point& p = walker.points[rng() % walker.points.size()];
    if (p.at + p.size > size) continue;
    uint64_t old = 0;
    std::memcpy(&old, data + p.at, p.size);  // little-endian, as FlatBuffers stores it
    const uint64_t value = new_value(rng, p.place, old, p.size);
    std::memcpy(data + p.at, &value, p.size);
  }
  return size;
}
