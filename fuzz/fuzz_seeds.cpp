// fuzz_seeds FIXTURES_DIR OUT_DIR: writes the seed files of every fuzz target into OUT_DIR/<target>/: the
// fixtures of their kind (read in place, up to 1 MiB each), the XNNPACK payloads inside the fixture programs,
// and small files the project's writer makes (programs with planned, constant and delegated values, a .ptd,
// an ETDump, .npy/.npz files and tokenizers). scripts/fuzz.sh runs it; nothing here is checked in.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "etnp/error.h"
#include "format/etdump.h"
#include "format/npy.h"
#include "format/pte_file.h"
#include "tools/writer/writer.h"
#include "tools/writer/xnnpack_writer.h"

namespace fs = std::filesystem;
using namespace etnp;
using Bytes = std::vector<uint8_t>;

namespace {

fs::path out_root;
int written = 0;

void seed(const std::string& target, const std::string& name, const Bytes& bytes) {
  fs::create_directories(out_root / target);
  std::ofstream(out_root / target / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ++written;
}

Bytes read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

format::TensorSpec f32(std::vector<int32_t> sizes) { return {ScalarType::Float, std::move(sizes), {}, {}, {}}; }

Bytes add_program(bool dynamic) {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  format::TensorSpec spec = f32({2, 3});
  if (dynamic) spec.dynamism = ShapeDynamism::DynamicBound;
  const int32_t x = m.planned_tensor(spec), y = m.planned_tensor(spec), sum = m.planned_tensor(spec);
  const std::vector<float> bias = {0.5f, 1.5f, -2.0f};
  const int32_t b = m.constant_tensor(f32({3}), format::as_bytes(bias));
  const int32_t out = m.planned_tensor(spec);
  m.kernel("aten::add.out", {x, y, m.int_value(1), sum, sum});
  m.kernel("aten::mul.out", {sum, b, out, out});
  m.set_inputs({x, y});
  m.set_outputs({out});
  return w.serialize();
}

format::XnnpackPayload xnnpack_graph() {
  format::XnnpackGraphWriter g;
  const uint32_t x = g.input({1, 4}, 0);
  const std::vector<float> weight(12, 0.25f), bias = {1, 2, 3};
  const uint32_t fc = g.internal({1, 3});
  g.fully_connected(x, g.constant({3, 4}, weight), g.constant({3}, bias), fc);
  g.clamp(fc, g.output({1, 3}, 1), 0.0f, 6.0f);
  return g.finish();
}

Bytes delegate_program() {
  format::ProgramWriter w;
  auto& m = w.add_method("forward");
  const int32_t x = m.planned_tensor(f32({1, 4})), y = m.planned_tensor(f32({1, 3}));
  format::add_xnnpack_delegate(w, m, xnnpack_graph(), {x, y});
  m.set_inputs({x});
  m.set_outputs({y});
  return w.serialize();
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

// A stored (uncompressed) zip of one entry, as numpy.savez writes it: local header, data, central directory.
Bytes npz_of(const std::string& entry, const Bytes& data) {
  Bytes out;
  auto u16 = [&](uint32_t v) { out.push_back(v & 0xFF); out.push_back(v >> 8 & 0xFF); };
  auto u32 = [&](uint32_t v) { u16(v & 0xFFFF); u16(v >> 16); };
  auto header = [&](uint32_t magic, bool central) {
    u32(magic);
    if (central) u16(20);
    u16(20); u16(0); u16(0); u16(0); u16(0); u32(0);  // version, flags, stored, time, date, crc (unchecked)
    u32(static_cast<uint32_t>(data.size())); u32(static_cast<uint32_t>(data.size()));
    u16(static_cast<uint32_t>(entry.size())); u16(0);
    if (central) { u16(0); u16(0); u16(0); u32(0); u32(0); }  // comment, disk, attributes, local offset 0
    out.insert(out.end(), entry.begin(), entry.end());
  };
  header(0x04034b50, false);
  out.insert(out.end(), data.begin(), data.end());
  const size_t central = out.size();
  header(0x02014b50, true);
  const size_t central_size = out.size() - central;
  u32(0x06054b50); u16(0); u16(0); u16(1); u16(1);
  u32(static_cast<uint32_t>(central_size)); u32(static_cast<uint32_t>(central)); u16(0);
  return out;
}

// Every single-byte token at its rank, as a tiktoken file lists them, then "ab".
std::string tiktoken_text() {
  static constexpr char kTable[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string s;
  for (int b = 0; b < 256; ++b) s += std::string{kTable[b >> 2], kTable[(b & 3) << 4], '=', '='} + " " + std::to_string(b) + "\n";
  return s + "YWI= 256\n";
}

void pte_seed(const std::string& name, const Bytes& bytes) {
  for (const char* target : {"fuzz_pte", "fuzz_load_methods", "fuzz_execute"}) seed(target, name, bytes);
}

// The XNNPACK payloads of a fixture program.
void payload_seeds(const std::string& name, const Bytes& bytes) {
  try {
    auto pte = format::PteFile::parse(format::ByteSource::from_buffer(bytes, nullptr, name), Verification::Minimal);
    const auto* delegates = pte->plan(0).delegates();
    for (size_t i = 0; delegates != nullptr && i < delegates->size(); ++i) {
      const auto payload = pte->delegate_payload(*delegates->Get(i));
      if (payload.size() <= (1u << 20)) seed("fuzz_xnnpack", name + "." + std::to_string(i), Bytes(payload.begin(), payload.end()));
    }
  } catch (const Error&) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_seeds FIXTURES_DIR OUT_DIR\n");
    return 2;
  }
  out_root = argv[2];
  int npy = 0;
  if (fs::is_directory(argv[1])) {
    for (const auto& entry : fs::recursive_directory_iterator(argv[1])) {
      if (!entry.is_regular_file() || entry.file_size() > (1u << 20)) continue;
      const std::string ext = entry.path().extension();
      std::string name = fs::relative(entry.path(), argv[1]).string();
      for (char& c : name) c = c == '/' ? '_' : c;
      if (ext == ".pte") {
        const Bytes bytes = read(entry.path());
        pte_seed(name, bytes);
        payload_seeds(name, bytes);
      } else if (ext == ".ptd") {
        seed("fuzz_ptd", name, read(entry.path()));
      } else if (ext == ".bpte") {
        seed("fuzz_bpte", name, read(entry.path()));
      } else if (ext == ".etdp" || ext == ".etdump") {
        seed("fuzz_etdump", name, read(entry.path()));
      } else if (ext == ".npy" && npy++ < 40) {  // a sample: the fixtures hold about a thousand
        Bytes bytes = read(entry.path());
        bytes.insert(bytes.begin(), 0);
        seed("fuzz_npy", name, bytes);
      }
    }
  }
  pte_seed("writer_add.pte", add_program(false));
  pte_seed("writer_add_dynamic.pte", add_program(true));
  pte_seed("writer_xnnpack.pte", delegate_program());
  seed("fuzz_xnnpack", "writer_fc.xnn", xnnpack_graph().bytes);

  format::PtdWriter ptd;
  const std::vector<float> weight = {1, 2, 3, 4, 5, 6};
  ptd.add_tensor("layer.weight", TensorLayout{ScalarType::Float, {2, 3}, {0, 1}}, format::as_bytes(weight));
  ptd.add_blob("blob", format::as_bytes(weight));
  seed("fuzz_ptd", "writer.ptd", ptd.serialize());

  format::RunBlock block;
  block.name = "Execute";
  block.allocators = {"method"};
  block.profile_events.push_back({});
  block.profile_events.back().name = "OPERATOR_CALL";
  seed("fuzz_etdump", "writer.etdp", format::write_etdump({block}));

  const std::vector<int64_t> shape = {2, 3};
  Bytes npy_bytes = format::encode_npy(ScalarType::Float, shape, weight.data());
  seed("fuzz_npy", "writer.npz", [&] { Bytes b = npz_of("x.npy", npy_bytes); b.insert(b.begin(), 1); return b; }());
  npy_bytes.insert(npy_bytes.begin(), 0);
  seed("fuzz_npy", "writer.npy", npy_bytes);

  seed("fuzz_tokenizer", "bpe.json",
       text(R"({"version":"1.0","added_tokens":[{"id":3,"content":"<s>","special":true}],)"
            R"("model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}})"));
  seed("fuzz_tokenizer", "tiktoken.model", text(tiktoken_text()));
  // SentencePiece ModelProto: pieces <unk> (type 2) and "\u2581a", trainer_spec.model_type = BPE.
  seed("fuzz_tokenizer", "sp.model",
       text(std::string("\x0A\x09\x0A\x05<unk>\x18\x02", 11) + std::string("\x0A\x0B\x0A\x04\xE2\x96\x81" "a\x15\x00\x00\x80\xBF", 13) +
            std::string("\x12\x02\x18\x02", 4)));
  std::printf("fuzz_seeds: %d seed files under %s\n", written, argv[2]);
  return 0;
}
