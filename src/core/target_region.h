// Compiling part of a file for a vector level: every function defined between ETNP_TARGET_BEGIN("isa") and
// ETNP_TARGET_END gets target("isa"), templates included, so that one source (an .inc of tiles) can be
// compiled once per level in one file and dispatched at run time (core/cpu_features.h). GCC's push_options
// and target pragmas, or clang's attribute push, which ignores GCC's.
#pragma once

#define ETNP_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define ETNP_TARGET_BEGIN(isa) ETNP_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define ETNP_TARGET_END ETNP_PRAGMA(clang attribute pop)
#else
#define ETNP_TARGET_BEGIN(isa) ETNP_PRAGMA(GCC push_options) ETNP_PRAGMA(GCC target(isa))
#define ETNP_TARGET_END ETNP_PRAGMA(GCC pop_options)
#endif
