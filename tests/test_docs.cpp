// docs/cli_reference.md is generated from the schema; this fails when it is stale.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "areal/config/emit.h"
#include "areal/config/schema.h"
#include "test_paths.h"

TEST_CASE("docs/cli_reference.md matches the option schema", "[docs]") {
  std::ifstream file(source_path("docs/cli_reference.md"));
  REQUIRE(file);
  std::stringstream text;
  text << file.rdbuf();
  std::string generated = areal::cli_reference_markdown();
  INFO("docs/cli_reference.md is stale: run scripts/gen_docs.sh");
  CHECK(text.str() == generated);
  for (const auto& spec : areal::option_schema()) CHECK(generated.find("`" + spec.name + "`") != std::string::npos);
}
