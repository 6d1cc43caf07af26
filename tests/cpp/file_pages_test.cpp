// What a delegate packed at load leaves the process's resident memory: the file pages of its payload and of the
// named data it read are released once it is built (format::ByteSource::release), as the official runtime frees
// its payload; reading them again brings them back from the file, and a caller's buffer is never touched.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "etnp/etnp.h"
#include "fixtures.h"
#include "format/byte_source.h"
#include "tools/writer/writer.h"
#include "writer_test_util.h"

namespace etnp {
namespace {

using format::ByteSource;

/// The resident KiB of this process's mappings of `path` (the Rss lines of /proc/self/smaps under it).
size_t resident_kib_of(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  size_t kib = 0;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < 16 &&
        line.find(' ') != std::string::npos) {
      inside = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      std::istringstream(line.substr(4)) >> kib;
      return kib;
    }
  }
  return 0;
}

/// Loads fixture `id`: of its mapping, less than 1 MiB stays resident after the load (the program's tables, and
/// pages of constants the run reads that the kernel mapped beside consumed ones, 64 KiB windows at most); a
/// second method over the same program reads the released bytes again from the file, with the same outputs.
void expect_consumed_weights_leave_resident_memory(const std::string& id) {
  const std::string path = std::filesystem::canonical(etnp::testing::fixtures_dir() + "/" + id + ".pte");
  Program program = Program::load_file(path);
  if (resident_kib_of(path) == 0) {
    // Its header and tables were read, so a kernel reports some residency; qemu-user's smaps reports none.
    GTEST_SKIP() << "/proc/self/smaps shows no resident pages for the mapped program (emulated?)";
  }
  auto method = program.load_method("forward");
  EXPECT_LT(resident_kib_of(path), 1024u) << id;
  const auto first = etnp::testing::run_first_case(id, "forward", *method);
  auto again = program.load_method("forward");
  EXPECT_EQ(etnp::testing::run_first_case(id, "forward", *again), first) << id;
}

TEST(FilePages, ADelegatesPackedWeightsLeaveResidentMemory) {
  ETNP_REQUIRE_FIXTURES();
  // 14 MiB of weights in the file, all read while the delegate packed them.
  expect_consumed_weights_leave_resident_memory("exported/mobilenet_v2_xnnpack_fp32");
}

TEST(FilePages, ConstantsFoldedAtLoadLeaveResidentMemory) {
  ETNP_REQUIRE_FIXTURES();
  // MobileNetV2 without a delegate: its classifier's transposed weight (5 MB) is packed at load and its batch
  // norms' constants become scales and biases of the convolutions; those file pages are released (the run
  // reads the convolutions' weights from the file).
  expect_consumed_weights_leave_resident_memory("exported/mobilenet_v2_portable");
}

// A backend that reads its whole payload in init() and hands it to BackendInitContext::release_file_pages, noting
// the resident KiB of the program's mapping before and after: the pages go at once, during the load (not only at
// its end), so that a delegate's file and what it makes of it need not be resident together.
class ReleasingBackend final : public Backend {
 public:
  std::string_view name() const override { return "FilePagesTestReleasingBackend"; }
  bool is_available() const override { return true; }
  std::unique_ptr<DelegateHandle> init(const BackendInitContext& ctx, std::span<const uint8_t> payload,
                                       std::span<const CompileSpec>) override {
    unsigned sum = 0;
    for (uint8_t b : payload) sum += b;  // read it all, as a packing would
    payload_sum = sum;
    before_kib = resident_kib_of(path);
    had_hook = static_cast<bool>(ctx.release_file_pages);
    if (had_hook) ctx.release_file_pages(payload);
    after_kib = resident_kib_of(path);
    return std::make_unique<DelegateHandle>();
  }
  void execute(DelegateHandle&, std::span<EValue* const>) override {}

  std::string path;
  unsigned payload_sum = 0;
  size_t before_kib = 0, after_kib = 0;
  bool had_hook = false;
};

TEST(FilePages, ABackendReleasesWhatItConsumedDuringItsInit) {
  static const auto backend = [] {
    auto b = std::make_shared<ReleasingBackend>();
    register_backend(b);
    return b;
  }();
  format::ProgramWriter writer;
  auto& m = writer.add_method("forward");
  const int32_t x = m.planned_tensor(writer_testing::f32({4}));
  const int32_t y = m.planned_tensor(writer_testing::f32({4}));
  std::vector<uint8_t> payload(4 << 20);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 13 + 1);
  m.delegate("FilePagesTestReleasingBackend", payload, {x, y});
  m.set_inputs({x});
  m.set_outputs({y});
  const std::vector<uint8_t> bytes = writer.serialize();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("etnp_released_payload_" + std::to_string(::getpid()) + ".pte")).string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  backend->path = std::filesystem::canonical(path).string();
  Program program = Program::load_file(path);
  auto method = program.load_method("forward");
  std::filesystem::remove(path);  // after the load: smaps names a deleted file "PATH (deleted)"
  ASSERT_TRUE(backend->had_hook);
  unsigned expected_sum = 0;
  for (uint8_t b : payload) expected_sum += b;
  EXPECT_EQ(backend->payload_sum, expected_sum);
  if (backend->before_kib == 0) GTEST_SKIP() << "/proc/self/smaps shows no resident pages for the mapped program";
  EXPECT_GE(backend->before_kib, 4096u);  // the payload it read
  EXPECT_LT(backend->after_kib, 256u);    // dropped within init(): the program's tables stay
}

TEST(FilePages, ReleaseLeavesCallersBuffersAndRangesOutsideTheMappingAlone) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<uint8_t> buffer(8 * page, 0x5a);
  auto source = ByteSource::from_buffer(buffer, nullptr, "<buffer>");
  source->release(source->bytes());
  EXPECT_EQ(std::vector<uint8_t>(source->bytes().begin(), source->bytes().end()), buffer);

  // A mapped file: its released pages read back the same bytes; a range outside it is ignored.
  char name[] = "/tmp/etnp_file_pages_XXXXXX";
  const int fd = ::mkstemp(name);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> content(8 * page);
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  auto mapped = ByteSource::map_fd(fd, name);
  ::close(fd);
  ::unlink(name);
  const std::span<const uint8_t> bytes = mapped->bytes();
  ASSERT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.end()), content);
  mapped->release(bytes.subspan(page / 2, 5 * page));  // not page-aligned: the whole pages inside it
  mapped->release(buffer);                              // not in the mapping
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.end()), content);
  EXPECT_EQ(buffer, std::vector<uint8_t>(8 * page, 0x5a));
}

}  // namespace
}  // namespace etnp
