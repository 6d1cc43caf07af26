// Everything a C++ application needs: loading, running, errors. Kernel and backend authors also include
// etnp/kernel.h or etnp/backend.h.
#pragma once

#include "etnp/error.h"
#include "etnp/program.h"
#include "etnp/scalar_type.h"
