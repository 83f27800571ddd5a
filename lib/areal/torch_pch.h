// Precompiled header for the sources that use torch (see lib/CMakeLists.txt).
#pragma once
#include <torch/torch.h>
