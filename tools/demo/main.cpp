// etnp_demo: writes the MobileNetV2 demo programs (and their weights, for comparisons with PyTorch).
//
//   etnp_demo --output-dir DIR [--seed N] [--num-classes N] [--ptd]
//
// DIR/mobilenet_v2_xnnpack.pte   the network in one XNNPACK delegate
// DIR/mobilenet_v2_portable.pte  portable operators only
// DIR/mobilenet_v2_weights.bin   every parameter as float32, PyTorch layout
// DIR/mobilenet_v2_weights.json  names (torchvision state_dict keys), shapes and offsets into the .bin
// DIR/mobilenet_v2_input.npy     a seeded 1x3x224x224 input
// DIR/tiny_add.pte              x + y on [1] float tensors (for per-call overhead measurements)
// DIR/tiny_add_xnnpack.pte      the same in one XNNPACK delegate (what a load benchmark runs first, so that
//                               setting the delegate library up once per process counts for no program)
// with --ptd also DIR/mobilenet_v2_xnnpack_ptd.pte + DIR/mobilenet_v2_xnnpack_ptd.ptd (weights outside).
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/number_text.h"
#include "tools/demo/mobilenet_v2.h"
#include "etnp/error.h"
#include "format/npy.h"
#include "tools/writer/xnnpack_writer.h"

namespace {

int usage(const char* message) {
  if (message != nullptr) std::fprintf(stderr, "etnp_demo: %s\n", message);
  std::fprintf(stderr, "usage: etnp_demo --output-dir DIR [--seed N] [--num-classes N] [--ptd]\n");
  return 2;
}

bool make_dirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') {
      const std::string prefix = path.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  uint64_t seed = 0;
  int32_t num_classes = 1000;
  bool ptd = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--output-dir") {
      const char* v = next();
      if (v == nullptr) return usage("--output-dir needs a value");
      dir = v;
    } else if (a == "--seed") {
      const char* v = next();
      int64_t n = 0;
      if (v == nullptr) return usage("--seed needs a value");
      if (!etnp::parse_int(v, &n) || n < 0) return usage("--seed takes a non-negative integer");
      seed = static_cast<uint64_t>(n);
    } else if (a == "--num-classes") {
      const char* v = next();
      int64_t n = 0;
      if (v == nullptr) return usage("--num-classes needs a value");
      if (!etnp::parse_int(v, &n) || n < 1 || n > INT32_MAX) return usage("--num-classes takes a positive integer");
      num_classes = static_cast<int32_t>(n);
    } else if (a == "--ptd") {
      ptd = true;
    } else if (a == "-h" || a == "--help") {
      usage(nullptr);
      return 0;
    } else {
      return usage(("unknown argument '" + a + "'").c_str());
    }
  }
  if (dir.empty()) return usage("--output-dir is required");
  if (!make_dirs(dir)) {
    std::fprintf(stderr, "etnp_demo: cannot create '%s': %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  try {
    using namespace etnp;
    const demo::MobileNetV2 net = demo::build_mobilenet_v2(seed, num_classes);
    auto report = [](const std::string& path, size_t bytes) {
      std::printf("wrote %s (%.1f MiB)\n", path.c_str(), static_cast<double>(bytes) / (1024.0 * 1024.0));
    };
    {
      format::ProgramWriter w;
      demo::write_xnnpack_program(net, w);
      const std::string path = dir + "/mobilenet_v2_xnnpack.pte";
      report(path, w.write(path));
    }
    {
      format::ProgramWriter w;
      demo::write_portable_program(net, w);
      const std::string path = dir + "/mobilenet_v2_portable.pte";
      report(path, w.write(path));
    }
    {
      // x + y on one-element tensors: the per-call overhead benchmark's program.
      format::ProgramWriter w;
      auto& m = w.add_method("forward");
      const format::TensorSpec one{ScalarType::Float, {1}, {}, {}, {}};
      const int32_t x = m.planned_tensor(one), y = m.planned_tensor(one), z = m.planned_tensor(one);
      m.kernel("aten::add.out", {x, y, m.int_value(1), z, z});
      m.set_inputs({x, y});
      m.set_outputs({z});
      const std::string path = dir + "/tiny_add.pte";
      report(path, w.write(path));
    }
    {
      format::XnnpackGraphWriter g;
      const uint32_t x = g.input({1}, 0), y = g.input({1}, 1), z = g.output({1}, 2);
      g.add(x, y, z);
      format::ProgramWriter w;
      auto& m = w.add_method("forward");
      const format::TensorSpec one{ScalarType::Float, {1}, {}, {}, {}};
      const int32_t xv = m.planned_tensor(one), yv = m.planned_tensor(one), zv = m.planned_tensor(one);
      format::add_xnnpack_delegate(w, m, g.finish(), {xv, yv, zv});
      m.set_inputs({xv, yv});
      m.set_outputs({zv});
      const std::string path = dir + "/tiny_add_xnnpack.pte";
      report(path, w.write(path));
    }
    if (ptd) {
      format::ProgramWriter w;
      demo::write_xnnpack_program(net, w, /*constants_in_ptd=*/true);
      const std::string path = dir + "/mobilenet_v2_xnnpack_ptd.pte";
      report(path, w.write(path));
      const std::string data_path = dir + "/mobilenet_v2_xnnpack_ptd.ptd";
      const auto bytes = w.external_data().serialize();
      format::write_file(data_path, bytes);
      report(data_path, bytes.size());
    }
    demo::write_weights(net, seed, dir + "/mobilenet_v2_weights.bin", dir + "/mobilenet_v2_weights.json");
    std::printf("wrote %s/mobilenet_v2_weights.{bin,json}\n", dir.c_str());

    // A seeded input in [0, 1) normalised like ImageNet images, so the demo has something image-like to run.
    std::vector<float> input(3 * 224 * 224);
    uint64_t state = seed ^ 0x5eed;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, stdev[3] = {0.229f, 0.224f, 0.225f};
    for (size_t i = 0; i < input.size(); ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>(state >> 40) / static_cast<float>(1ull << 24);
      const size_t c = i / (224 * 224);
      input[i] = (u - mean[c]) / stdev[c];
    }
    format::write_npy(dir + "/mobilenet_v2_input.npy", ScalarType::Float, {1, 3, 224, 224}, input.data());
    std::printf("wrote %s/mobilenet_v2_input.npy\n", dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "etnp_demo: %s\n", e.what());
    return 1;
  }
  return 0;
}
