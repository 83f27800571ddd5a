// The command line: program flags and the three spellings of an override.
#include <catch2/catch.hpp>

#include "areal/config/cli.h"
#include "areal/config/loader.h"
#include "areal/util/error.h"

using namespace areal;
using Catch::Matchers::Contains;

namespace {

CommandLine parse(std::vector<std::string> args) {
  args.insert(args.begin(), "areal-train");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("all three override spellings give the same config", "[cli]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--fsdp.memory_efficient_load", "true", "--optimizer.lr", "0.25"},
           {"--fsdp.memory_efficient_load=true", "--optimizer.lr=0.25"},
           {"fsdp.memory_efficient_load=true", "optimizer.lr=0.25"},
       }) {
    INFO(args[0]);
    CommandLine cli = parse(args);
    Config cfg = load_config("", cli.overrides);
    CHECK(cfg.fsdp.memory_efficient_load);
    CHECK(cfg.optimizer.lr == 0.25);
  }
}

TEST_CASE("AReaL's spellings work on the command line exactly as in YAML", "[cli]") {
  // actor.fsdp.memory_efficient_load is AReaL's spelling of the headline flag; actor.path
  // and actor.optimizer.lr are how AReaL users override a config; launcher.* is ignored.
  const std::string yaml =
      "actor:\n  path: /models/qwen\n  fsdp:\n    memory_efficient_load: true\n  optimizer:\n    lr: 0.25\n"
      "launcher:\n  trainer_port: 1234\n";
  const Config from_yaml = load_config_text(yaml, "areal.yaml", {});
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--actor.path", "/models/qwen", "--actor.fsdp.memory_efficient_load", "true", "--actor.optimizer.lr", "0.25",
            "--launcher.trainer_port", "1234"},
           {"actor.path=/models/qwen", "actor.fsdp.memory_efficient_load=true", "actor.optimizer.lr=0.25",
            "launcher.trainer_port=1234"},
           {"--actor.path=/models/qwen", "--actor.fsdp.memory_efficient_load=true", "--actor.optimizer.lr=0.25",
            "--launcher.trainer_port=1234"},
       }) {
    INFO(args[0]);
    Config cfg = load_config("", parse(args).overrides);
    CHECK(cfg.model_path == "/models/qwen");
    CHECK(cfg.fsdp.memory_efficient_load);
    CHECK(cfg.optimizer.lr == 0.25);
    CHECK(cfg.model_path == from_yaml.model_path);
    CHECK(cfg.fsdp.memory_efficient_load == from_yaml.fsdp.memory_efficient_load);
    REQUIRE(cfg.ignored_keys.size() == 1);  // ignored with the same reason (YAML names the section)
    CHECK_THAT(cfg.ignored_keys[0], Contains("launcher.trainer_port: mpirun or srun starts the ranks"));
    CHECK_THAT(from_yaml.ignored_keys.at(0), Contains("launcher: mpirun or srun starts the ranks"));
  }
  CHECK_THAT(error_of({"--actor.path", "/a", "--model_path", "/b"}),
             Contains("option 'model_path' given twice (as 'model_path' and 'actor.path')"));
  CHECK_THAT(error_of({"--actor.path"}), Contains("'actor.path' needs a value"));
}

TEST_CASE("an empty value (key= or --key=) sets the option to empty, not to the next argument", "[cli]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"valid_dataset.path=", "model_path=", "optimizer.lr=0.5"},
           {"--valid_dataset.path=", "--model_path=", "--optimizer.lr=0.5"},
           {"--valid_dataset.path", "", "--model_path=", "--optimizer.lr", "0.5"},
       }) {
    INFO(args[0]);
    CommandLine cli = parse(args);
    Config merged = load_config("", cli.overrides);
    CHECK(merged.valid_dataset.path.empty());
    CHECK(merged.model_path.empty());
    CHECK(merged.optimizer.lr == 0.5);
  }
}

TEST_CASE("program flags", "[cli]") {
  CommandLine cli = parse({"--config", "run.yaml", "--print-config", "seed=3"});
  CHECK(cli.config_path == "run.yaml");
  CHECK(cli.print_config);
  REQUIRE(cli.overrides.size() == 1);
  CHECK(cli.overrides[0].key == "seed");
  CHECK(cli.overrides[0].value == "3");
  // A bare key=value right after a flag that takes a value is that flag's value.
  CHECK(parse({"--experiment_name", "a=b"}).overrides.at(0).value == "a=b");
  // Negative numbers are values, not flags.
  CHECK(parse({"--actor.reward_bias", "-1.5"}).overrides.at(0).value == "-1.5");
}

TEST_CASE("--help lists every option with its default and doc", "[cli]") {
  CommandLine cli = parse({"--help"});
  REQUIRE(cli.help);
  CHECK_THAT(cli.help_text, Contains("--fsdp.memory_efficient_load") && Contains("Rank 0 streams the checkpoint"));
  CHECK_THAT(cli.help_text, Contains("--optimizer.lr") && Contains("2e-05"));
  CHECK_THAT(cli.help_text, Contains("--print-config"));
  CHECK(parse({"-h"}).help);
}

TEST_CASE("command-line errors are clear", "[cli][errors]") {
  CHECK_THAT(error_of({"--fsdp.memory_efficent_load", "true"}),
             Contains("'fsdp.memory_efficent_load' is not an option") &&
                 Contains("did you mean 'fsdp.memory_efficient_load'"));
  CHECK_THAT(error_of({"fsdp.memory_efficent_load=true"}), Contains("did you mean 'fsdp.memory_efficient_load'"));
  CHECK_THAT(error_of({"--optimizer.lr"}), Contains("optimizer.lr"));
  CHECK_THAT(error_of({"--seed", "1", "--seed=2"}), Contains("seed"));
  CHECK_THAT(error_of({"stray"}), Contains("unexpected argument 'stray'"));
}

TEST_CASE("typed errors from command-line values", "[cli][errors]") {
  auto load_error = [](std::vector<std::string> args) {
    try {
      load_config("", parse(std::move(args)).overrides);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(load_error({"--optimizer.lr", "fast"}), Contains("command line") && Contains("'fast' is not a number"));
  CHECK_THAT(load_error({"--optimizer.lr", "-1"}), Contains("out of range"));
  CHECK_THAT(load_error({"--actor.kl_estimator", "k9"}), Contains("one of k1, k2, k3"));
}
