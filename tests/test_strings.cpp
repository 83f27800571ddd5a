#include <catch2/catch.hpp>

#include "areal/util/strings.h"

using namespace areal;

TEST_CASE("edit_distance counts single-character edits", "[util]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("memory_efficent_load", "memory_efficient_load") == 1);
}

TEST_CASE("closest_match suggests plausible typos only", "[util]") {
  std::vector<std::string> names = {"optimizer.lr", "optimizer.eps", "fsdp.memory_efficient_load"};
  CHECK(closest_match("fsdp.memory_efficent_load", names) == "fsdp.memory_efficient_load");
  CHECK(closest_match("optimizer.lrr", names) == "optimizer.lr");
  CHECK(closest_match("completely_different", names).empty());
}

TEST_CASE("split, trim, join", "[util]") {
  CHECK(split("a,b,,c", ',') == std::vector<std::string>{"a", "b", "", "c"});
  CHECK(trim("  x y \t\n") == "x y");
  CHECK(join({"a", "b"}, ", ") == "a, b");
}
