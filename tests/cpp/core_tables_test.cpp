// The process-wide facts of src/core that every layer reads: the CPU's vector level, the scalar-type table and
// the list of error kinds.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "core/cpu_features.h"
#include "cpu_levels.h"
#include "etnp/error.h"
#include "etnp/scalar_type.h"

namespace etnp {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// The flags of the first processor in /proc/cpuinfo (x86's "flags" line); empty where there is no such file.
std::set<std::string> proc_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}
#endif

TEST(CpuFeatures, AgreesWithProcCpuinfo) {
#if defined(__x86_64__) || defined(__i386__)
  const std::set<std::string> flags = proc_cpu_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  EXPECT_EQ(has_avx2_fma(), flags.count("avx2") == 1 && flags.count("fma") == 1);
  // The kernel lists an AVX-512 flag only where it saves the 512-bit state, as the level requires.
  const bool vnni = flags.count("avx512f") == 1 && flags.count("avx512bw") == 1 && flags.count("avx512vl") == 1 &&
                    flags.count("avx512_vnni") == 1;
  EXPECT_EQ(cpu_level() == CpuLevel::avx512_vnni, has_avx2_fma() && vnni) << cpu_level_name(cpu_level());
#else
  EXPECT_FALSE(has_avx2_fma());  // the base level off x86
#endif
  EXPECT_EQ(has_avx2_fma(), has_avx2_fma());  // decided once
}

#if defined(__aarch64__) && defined(__linux__)
TEST(CpuFeatures, AgreesWithTheKernelsHwcaps) {
  // The kernel's hwcaps are what cpuinfo reads too, but through its own parsing: bit 20 of AT_HWCAP is ASIMDDP
  // (SDOT/UDOT), bit 13 of AT_HWCAP2 is I8MM (arch/arm64/include/uapi/asm/hwcap.h).
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  const bool dotprod = (hwcap & (1ul << 20)) != 0, i8mm = (hwcap2 & (1ul << 13)) != 0;
  const CpuLevel want = !dotprod ? CpuLevel::neon : !i8mm ? CpuLevel::neon_dotprod : CpuLevel::neon_i8mm;
  EXPECT_EQ(cpu_level(), want) << cpu_level_name(cpu_level());
  EXPECT_TRUE(has_neon());  // AArch64's base
  EXPECT_FALSE(has_avx2_fma());
}
#endif

TEST(CpuFeatures, EveryLevelCanBeForcedAndLifted) {
  const CpuLevel top = cpu_level();
  const auto levels = cpu_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), CpuLevel::portable);
  std::set<std::string> names;
  for (size_t i = 0; i < levels.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(levels[i - 1], levels[i]) << "lowest first";
    }
    EXPECT_TRUE(names.insert(cpu_level_name(levels[i])).second) << cpu_level_name(levels[i]);
    EXPECT_NE(std::string(cpu_level_name(levels[i])), "unknown");
  }
  std::vector<CpuLevel> seen;
  testing::at_each_cpu_level([&](CpuLevel level) {
    EXPECT_EQ(cpu_level(), level);
    EXPECT_EQ(has_avx2_fma() || has_neon(), level != CpuLevel::portable);
    seen.push_back(level);
  });
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), CpuLevel::portable);
  EXPECT_EQ(seen.back(), top);  // every level up to the detected one ran
  EXPECT_EQ(cpu_level(), top);  // and the cap is lifted
}

TEST(ScalarTypeTable, EveryTypeRoundTripsThroughItsNames) {
  std::set<std::string_view> names, enumerators;
  for (int code = 0; code < kNumScalarTypes; ++code) {
    const auto type = static_cast<ScalarType>(code);
    ASSERT_TRUE(is_valid_scalar_type(code));
    const std::string_view name = scalar_type_name(type);
    EXPECT_EQ(scalar_type_from_name(name), type) << name;
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    EXPECT_TRUE(enumerators.insert(scalar_type_enumerator_name(type)).second);
    EXPECT_GT(element_size(type), 0u) << name;
  }
  EXPECT_EQ(kNumScalarTypes, 30);  // the .pte format's codes 0..29
  EXPECT_FALSE(is_valid_scalar_type(kNumScalarTypes));
  EXPECT_FALSE(is_valid_scalar_type(-1));
  EXPECT_EQ(scalar_type_name(static_cast<ScalarType>(kNumScalarTypes)), "invalid");
  EXPECT_EQ(element_size(static_cast<ScalarType>(kNumScalarTypes)), 0u);
  EXPECT_EQ(scalar_type_from_name("Float"), std::nullopt);  // enumerator names are not dtype names
}

TEST(ScalarTypeTable, RowsMatchTheFormat) {
  // Spot checks against c10's numbering and sizes (the format's): a shifted or mistyped row shows here.
  EXPECT_EQ(scalar_type_name(ScalarType::Float), "float32");
  EXPECT_EQ(scalar_type_enumerator_name(ScalarType::Float), "Float");
  EXPECT_EQ(static_cast<int>(ScalarType::Bool), 11);
  EXPECT_EQ(static_cast<int>(ScalarType::BFloat16), 15);
  EXPECT_EQ(static_cast<int>(ScalarType::UInt64), 29);
  EXPECT_EQ(element_size(ScalarType::ComplexDouble), 16u);
  EXPECT_EQ(element_size(ScalarType::Half), 2u);
  EXPECT_EQ(element_size(ScalarType::Long), 8u);
  EXPECT_EQ(scalar_type_name(ScalarType::Float8_e4m3fnuz), "float8_e4m3fnuz");
  for (ScalarType t : {ScalarType::Half, ScalarType::Float, ScalarType::Double, ScalarType::BFloat16}) {
    EXPECT_TRUE(is_floating_type(t)) << scalar_type_name(t);
    EXPECT_FALSE(is_integral_type(t, true)) << scalar_type_name(t);
  }
  for (ScalarType t : {ScalarType::Byte, ScalarType::Char, ScalarType::Short, ScalarType::Int, ScalarType::Long,
                       ScalarType::UInt16, ScalarType::UInt32, ScalarType::UInt64}) {
    EXPECT_TRUE(is_integral_type(t, false)) << scalar_type_name(t);
    EXPECT_FALSE(is_floating_type(t)) << scalar_type_name(t);
  }
  EXPECT_TRUE(is_integral_type(ScalarType::Bool, true));
  EXPECT_FALSE(is_integral_type(ScalarType::Bool, false));
  for (ScalarType t : {ScalarType::ComplexFloat, ScalarType::QInt8, ScalarType::Bits8, ScalarType::Float8_e5m2}) {
    EXPECT_FALSE(is_floating_type(t)) << scalar_type_name(t);
    EXPECT_FALSE(is_integral_type(t, true)) << scalar_type_name(t);
  }
}

TEST(ErrorKinds, EachKindIsNamedAfterItsEnumerator) {
  std::set<std::string> names;
#define ETNP_ERROR_KIND_CHECK(name)                                  \
  EXPECT_STREQ(error_kind_name(ErrorKind::name), #name);             \
  EXPECT_EQ(Error(ErrorKind::name, "d").kind(), ErrorKind::name);    \
  names.insert(#name);
  ETNP_ERROR_KINDS(ETNP_ERROR_KIND_CHECK)
#undef ETNP_ERROR_KIND_CHECK
  EXPECT_TRUE(names.count("InvalidArgument"));
}

}  // namespace
}  // namespace etnp
