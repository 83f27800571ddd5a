// Shared state of the multi-rank tests: this rank and its Communicator.
#pragma once

#include <memory>

#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"

namespace areal::testing {
extern RankInfo g_me;
extern std::unique_ptr<Communicator> g_comm;
}  // namespace areal::testing
