# `cmake --install <build> --prefix <prefix>` installs what a C++ program needs to use etnp:
#   include/etnp/*.h                            the public API (it includes no generated or third-party header)
#   lib/libetnp_<layer>.a                       one static library per layer
#   lib/cmake/etnp/etnpConfig.cmake ...         the CMake package: find_package(etnp CONFIG [COMPONENTS xnnpack])
#   lib/pkgconfig/etnp.pc                       the same for pkg-config users
#   bin/etnp                                    the command-line tool
# The package's targets are etnp::etnp (everything: link this), and the layers etnp::core, etnp::format,
# etnp::compute, etnp::kernels, etnp::backend_xnnpack (component xnnpack), etnp::runtime and etnp::llm.
# Tests, benchmarks, the .pte writer and the demo are not installed.
include(CMakePackageConfigHelpers)

set(ETNP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/etnp)
set(ETNP_INSTALLED_LAYERS etnp_core etnp_format etnp_compute etnp_kernels ${ETNP_BACKEND_LIBS} etnp_runtime etnp_llm)
foreach(layer ${ETNP_INSTALLED_LAYERS})
  string(REGEX REPLACE "^etnp_" "" name ${layer})
  set_target_properties(${layer} PROPERTIES EXPORT_NAME ${name})
endforeach()

# etnp::etnp: the one target a program links; it brings every layer and, through them, the system libraries.
add_library(etnp_all INTERFACE)
set_target_properties(etnp_all PROPERTIES EXPORT_NAME etnp)
target_link_libraries(etnp_all INTERFACE etnp_runtime etnp_llm)
add_library(etnp::etnp ALIAS etnp_all)

install(DIRECTORY include/etnp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS ${ETNP_INSTALLED_LAYERS} etnp_all EXPORT etnpTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS etnp_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT etnpTargets NAMESPACE etnp:: DESTINATION ${ETNP_INSTALL_CMAKEDIR})

# The configuration the installed package was built with, for etnpConfig.cmake and etnp.pc.
set(ETNP_PACKAGE_WITH_XNNPACK OFF)
if(ETNP_WITH_XNNPACK)
  set(ETNP_PACKAGE_WITH_XNNPACK ON)
endif()
configure_package_config_file(cmake/etnpConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/etnpConfig.cmake
                              INSTALL_DESTINATION ${ETNP_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/etnpConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/etnpConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/etnpConfigVersion.cmake
              cmake/etnpDependencies.cmake
        DESTINATION ${ETNP_INSTALL_CMAKEDIR})

# etnp.pc: the static libraries in link order, then the system libraries they need.
set(ETNP_PC_LIBS "")
foreach(layer etnp_llm etnp_runtime ${ETNP_BACKEND_LIBS} etnp_kernels etnp_compute etnp_format etnp_core)
  string(APPEND ETNP_PC_LIBS " -l${layer}")
endforeach()
set(ETNP_PC_SYSTEM_LIBS "-lsentencepiece")
if(ETNP_WITH_XNNPACK)
  string(APPEND ETNP_PC_SYSTEM_LIBS " -lXNNPACK -lcpuinfo")  # cpuinfo: the delegate's AMX query
endif()
if(ETNP_VECTOR_MATH)
  string(APPEND ETNP_PC_SYSTEM_LIBS " -lsleef")
endif()
string(APPEND ETNP_PC_SYSTEM_LIBS " -lpthreadpool -pthread -lm")
set(ETNP_PC_CFLAGS "")
if(ETNP_WITH_XNNPACK)
  set(ETNP_PC_CFLAGS " -DETNP_WITH_XNNPACK=1")
endif()
# prefix from the .pc file's own place, so that `cmake --install --prefix` anywhere gives a working file.
file(RELATIVE_PATH ETNP_PC_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" ETNP_PC_PREFIX "${ETNP_PC_PREFIX}")
configure_file(cmake/etnp.pc.in ${CMAKE_CURRENT_BINARY_DIR}/etnp.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/etnp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
