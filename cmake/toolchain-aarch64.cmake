# Cross-compiling etnp for 64-bit Arm Linux (aarch64) on an x86-64 Debian machine: Debian's cross compilers
# (crossbuild-essential-arm64) and a sysroot holding Debian's arm64 packages of etnp's dependencies, unpacked
# (scripts/cross-arm64.sh makes it). Programs are run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR).
#
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
#         -DETNP_ARM64_SYSROOT=$HOME/.cache/etnp/arm64-sysroot
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(ETNP_ARM64_SYSROOT "$ENV{ETNP_ARM64_SYSROOT}" CACHE PATH "Debian arm64 packages unpacked (scripts/cross-arm64.sh)")
if(NOT ETNP_ARM64_SYSROOT OR NOT IS_DIRECTORY "${ETNP_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu")
  message(FATAL_ERROR "ETNP_ARM64_SYSROOT ('${ETNP_ARM64_SYSROOT}') is not a sysroot of arm64 packages: "
                      "scripts/cross-arm64.sh makes one")
endif()
# Try-compiles (check_include_file_cxx and the like) see the same variables.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ETNP_ARM64_SYSROOT)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The cross compiler keeps its own C library and libstdc++ (/usr/aarch64-linux-gnu); the sysroot adds the
# libraries etnp links. Libraries, headers and packages are looked up there only; programs (flatc, python3)
# are the host's.
set(CMAKE_FIND_ROOT_PATH "${ETNP_ARM64_SYSROOT}")
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# Architecture-independent CMake packages (nlohmann_json) are the host's; the rest are in the sysroot.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# Debian's multiarch headers (openssl/opensslconf.h, ...) of the sysroot, after everything else.
set(CMAKE_C_STANDARD_INCLUDE_DIRECTORIES "${ETNP_ARM64_SYSROOT}/usr/include/aarch64-linux-gnu")
set(CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES "${ETNP_ARM64_SYSROOT}/usr/include/aarch64-linux-gnu")

# The shared libraries that etnp's dependencies link in turn are found in the sysroot at link time.
set(arm64_libs "${ETNP_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${arm64_libs} -Wl,-rpath-link,${ETNP_ARM64_SYSROOT}/lib/aarch64-linux-gnu")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${CMAKE_EXE_LINKER_FLAGS_INIT}")

# pkg-config (PCRE2, utf8proc) reads the sysroot's .pc files and prefixes their paths with it.
set(ENV{PKG_CONFIG_LIBDIR} "${arm64_libs}/pkgconfig:${ETNP_ARM64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${ETNP_ARM64_SYSROOT}")

# qemu-aarch64 (Debian's qemu-user-static) runs the test programs: -cpu max turns on every extension qemu has
# (NEON, dotprod, i8mm, SVE), and the sysroot is its prefix for the loader and shared libraries.
find_program(ETNP_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(ETNP_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${ETNP_QEMU_AARCH64} -cpu max -L ${ETNP_ARM64_SYSROOT})
endif()
