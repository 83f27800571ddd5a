// Catch2 for test files that also include torch. c10's logging defines its own CHECK
// macro (abort on failure, counted nowhere); whichever header comes last wins, and both
// live in system include paths where the redefinition warning is silenced. Including
// c10's logging first makes Catch2's CHECK the one tests get, whatever they include after.
#pragma once

#include <c10/util/Logging.h>
#include <catch2/catch.hpp>
