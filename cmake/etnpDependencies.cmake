# The system libraries that etnp's static libraries link, found in one place for two users: CMakeLists.txt when
# etnp is built, and the installed etnpConfig.cmake when a program links the installed etnp (a static library
# leaves its dependencies to the program that links it, so the program's build must find the same ones).
#
# Debian ships no CMake package for pthreadpool, cpuinfo, XNNPACK, Sleef or SentencePiece, and Debian 12 and 13
# differ in what they do ship (XNNPACK 2022 and 2024, flatbuffers 2.0 and 23.5), so each is found by its library
# (and header, where etnp's sources include it) and wrapped in an imported target named etnp::dep_<name>;
# PCRE2 and utf8proc come from pkg-config, nlohmann_json and Threads from their CMake packages. FlatBuffers and
# FP16 are not here: etnp uses only their headers, inside its own sources, and a program using etnp needs neither.
include_guard(DIRECTORY)

# etnp_import_library(<target> <library cache variable> <library name> [HEADER <file> <header cache variable>])
# Creates the imported target <target> for the library find_library finds, with the header's folder as its
# include directory when HEADER is given. Creates nothing (and does not fail) when either is not found.
function(etnp_import_library target library_var name)
  cmake_parse_arguments(A "" "" "HEADER" ${ARGN})
  if(TARGET ${target})
    return()
  endif()
  find_library(${library_var} ${name})
  if(NOT ${library_var})
    return()
  endif()
  if(A_HEADER)
    list(GET A_HEADER 0 header)
    list(GET A_HEADER 1 header_var)
    find_path(${header_var} ${header})
    if(NOT ${header_var})
      return()
    endif()
  endif()
  add_library(${target} UNKNOWN IMPORTED)
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${library_var}}")
  if(A_HEADER)
    set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${${header_var}}")
  endif()
endfunction()

# etnp_require_library(<target> <library cache variable> <library name> <Debian package> [HEADER ...]):
# etnp_import_library, adding the library to the list `missing` of the calling scope when it is not found.
macro(etnp_require_library target library_var name package)
  etnp_import_library(${target} ${library_var} ${name} ${ARGN})
  if(NOT TARGET ${target})
    list(APPEND missing "${name} (Debian's ${package})")
  endif()
endmacro()

# etnp_find_dependencies(<missing variable> XNNPACK <ON|OFF> SLEEF <ON|OFF>)
# Finds every dependency of the layer libraries (XNNPACK and Sleef only when switched on) and sets
# <missing variable> to the list of those not found, each with the Debian package that provides it.
function(etnp_find_dependencies missing_var)
  cmake_parse_arguments(A "" "XNNPACK;SLEEF" "" ${ARGN})
  set(missing)

  find_package(Threads QUIET)
  if(NOT TARGET Threads::Threads)
    list(APPEND missing "Threads (the C library's pthreads)")
  endif()
  find_package(nlohmann_json QUIET)
  if(NOT TARGET nlohmann_json::nlohmann_json)
    list(APPEND missing "nlohmann_json (Debian's nlohmann-json3-dev)")
  endif()

  etnp_require_library(etnp::dep_pthreadpool PTHREADPOOL_LIB pthreadpool libpthreadpool-dev)
  etnp_require_library(etnp::dep_sentencepiece SENTENCEPIECE_LIBRARY sentencepiece libsentencepiece-dev
                       HEADER sentencepiece_processor.h SENTENCEPIECE_INCLUDE_DIR)
  if(A_XNNPACK)
    etnp_require_library(etnp::dep_xnnpack XNNPACK_LIB XNNPACK libxnnpack-dev HEADER xnnpack.h XNNPACK_INCLUDE_DIR)
    etnp_require_library(etnp::dep_cpuinfo CPUINFO_LIB cpuinfo libcpuinfo-dev)  # the delegate's AMX query
  endif()
  if(A_SLEEF)
    etnp_require_library(etnp::dep_sleef SLEEF_LIB sleef libsleef-dev)
  endif()

  find_package(PkgConfig QUIET)
  if(NOT PKG_CONFIG_FOUND)
    list(APPEND missing "pkg-config (Debian's pkgconf), which finds PCRE2 and utf8proc")
  else()
    foreach(dep "PCRE2;libpcre2-8;libpcre2-dev" "UTF8PROC;libutf8proc;libutf8proc-dev")
      list(GET dep 0 prefix)
      list(GET dep 1 module)
      list(GET dep 2 package)
      if(NOT TARGET PkgConfig::${prefix})
        pkg_check_modules(${prefix} QUIET IMPORTED_TARGET ${module})
      endif()
      if(NOT TARGET PkgConfig::${prefix})
        list(APPEND missing "${module} (Debian's ${package})")
      endif()
    endforeach()
  endif()
  set(${missing_var} "${missing}" PARENT_SCOPE)
endfunction()
