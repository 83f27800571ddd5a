#include "areal/config/allocation.h"

#include <cctype>
#include <charconv>

#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {

EngineShape parse_engine_shape(const std::string& text, const std::string& option, bool generation) {
  const char* engines = generation ? "areal, sglang or vllm" : "fsdp";
  auto refuse = [&](const std::string& why) -> EngineShape {
    throw ConfigError(cat("option '", option, "': '", text, "' ", why, " (e.g. ",
                          generation ? "areal:d1t2 or AReaL's sglang:d2t4" : "fsdp:d4", ")"));
  };
  EngineShape shape;
  std::string dims = text;
  if (const size_t colon = text.find(':'); colon != std::string::npos) {
    shape.engine = text.substr(0, colon);
    dims = text.substr(colon + 1);
  } else if (text.find_first_of("0123456789") == std::string::npos) {
    shape.engine = text;  // a name without dimensions ("megatron")
    dims.clear();
  }
  if (shape.engine.empty()) shape.engine = generation ? "areal" : "fsdp";
  const bool known = generation ? (shape.engine == "areal" || shape.engine == "sglang" || shape.engine == "vllm")
                                : shape.engine == "fsdp";
  if (!known)
    return refuse(cat("names the engine '", shape.engine, "'; areal-train's ", generation ? "generation" : "training",
                      " engine is spelled ", engines));
  int64_t pipeline = 1;
  size_t at = 0;
  while (at < dims.size()) {
    const char dim = dims[at++];
    int64_t n = 0;
    auto [end, ec] = std::from_chars(dims.data() + at, dims.data() + dims.size(), n);
    if (ec != std::errc() || n < 1) return refuse(cat("needs a positive count after '", std::string(1, dim), "'"));
    at = static_cast<size_t>(end - dims.data());
    switch (dim) {
      case 'd': shape.data = n; break;
      case 't': shape.tensor = n; break;
      case 'p': pipeline = n; break;
      case 'c': shape.context = n; break;
      case 'e': shape.expert = n; break;  // AReaL's expert parallelism (MoE)
      default: return refuse(cat("has the dimension '", std::string(1, dim), "'; known: d, t, p, c, e"));
    }
  }
  // AReaL's SFT config names the training engine alone (`backend: fsdp`): every rank.
  if (!generation && dims.empty()) return shape;  // data 0: the world size (check_allocation_against_world)
  if (shape.data == 0) return refuse("gives no data-parallel size 'dN'");
  if (pipeline != 1) return refuse("asks for pipeline parallelism, which areal-train does not have (use p1)");
  if (generation && shape.context != 1)
    return refuse("asks for context-parallel generation, which areal-train does not have (use c1; c is for training, "
                  "in actor.backend)");
  if (shape.context != 1 && shape.expert != 1)
    return refuse("asks for context and expert parallelism together, which areal-train does not have");
  if (generation && shape.expert != 1 && shape.expert != shape.tensor)
    return refuse(cat("asks for experts over ", shape.expert, " of the group's ", shape.tensor, " tensor-parallel ranks; "
                      "generation places them whole over all t ranks (e equal to t) or splits each over t (e1)"));
  if (!generation && shape.data % shape.expert != 0)
    return refuse(cat("asks for experts over groups of ", shape.expert, " ranks, which does not divide the ", shape.data,
                      " data-parallel ranks (e folds into d: use an e that divides d)"));
  if (!generation && shape.tensor != 1 && shape.expert != 1)
    return refuse("asks for tensor and expert parallelism together in training, which areal-train does not have "
                  "(use t1 with e, or e1 with t)");
  return shape;
}

Allocation parse_allocation(const Config& cfg) {
  Allocation a;
  if (!cfg.rollout.backend.empty()) a.rollout = parse_engine_shape(cfg.rollout.backend, "rollout.backend", true);
  if (!cfg.actor.backend.empty()) a.actor = parse_engine_shape(cfg.actor.backend, "actor.backend", false);
  const std::string& mode = cfg.allocation_mode;
  if (mode == "static") return a;
  // The deprecated spelling: "fsdp:dN", "dN", or "<generation>+<training>".
  Allocation old;
  if (const size_t plus = mode.find('+'); plus != std::string::npos) {
    old.rollout = parse_engine_shape(mode.substr(0, plus), "allocation_mode", true);
    old.actor = parse_engine_shape(mode.substr(plus + 1), "allocation_mode", false);
  } else {
    old.actor = parse_engine_shape(mode, "allocation_mode", false);
  }
  auto same = [](const EngineShape& x, const EngineShape& y) {
    return x.data == y.data && x.tensor == y.tensor && x.expert == y.expert;
  };
  if ((!a.rollout.engine.empty() && !old.rollout.engine.empty() && !same(a.rollout, old.rollout)) ||
      (!a.actor.engine.empty() && !same(a.actor, old.actor)))
    throw ConfigError(cat("option 'allocation_mode': '", mode, "' disagrees with rollout.backend '",
                          cfg.rollout.backend, "' / actor.backend '", cfg.actor.backend,
                          "'; give the shapes once (allocation_mode is the deprecated spelling)"));
  if (a.rollout.engine.empty()) a.rollout = old.rollout;
  if (a.actor.engine.empty()) a.actor = old.actor;
  return a;
}

void check_allocation_against_world(Allocation& a, int world_size) {
  if (a.actor.engine.empty()) a.actor = {"fsdp", world_size, 1};
  if (a.actor.data == 0) a.actor.data = world_size;  // `fsdp` alone
  const bool rollout_given = !a.rollout.engine.empty();
  if (!rollout_given) a.rollout = {"", a.actor.ranks(), 1};  // every training rank generates alone
  if (a.rollout.ranks() == world_size && a.actor.ranks() == world_size) return;  // colocated
  if (rollout_given && a.rollout.ranks() + a.actor.ranks() == world_size) {
    a.separate = true;  // asynchronous RL: the first ranks generate, the others train
    return;
  }
  if (a.actor.ranks() != world_size)
    throw ConfigError(cat("option 'actor.backend': 'fsdp:d", a.actor.data,
                          a.actor.tensor > 1 ? cat("t", a.actor.tensor) : std::string(),
                          a.actor.context > 1 ? cat("c", a.actor.context) : std::string(), "' asks for ",
                          a.actor.ranks(), " training ranks (d x t x c) but the job has ", world_size, " (launch with mpirun -np ",
                          a.actor.ranks(), ", or leave actor.backend empty)"));
  throw ConfigError(cat("option 'rollout.backend': '", a.rollout.engine, ":d", a.rollout.data, "t", a.rollout.tensor,
                        "' asks for ", a.rollout.ranks(), " generation ranks (d x t) but the job has ", world_size,
                        ": use d x t = ", world_size, " (colocated: every rank generates and trains) or d x t = ",
                        world_size, " - actor.backend's ranks (separate generation ranks, asynchronous RL)"));
}

Allocation allocation_for_world(const Config& cfg, int world_size) {
  Allocation allocation = parse_allocation(cfg);
  check_allocation_against_world(allocation, world_size);
  return allocation;
}

std::string describe_allocation(const Allocation& a) {
  const bool builtin_name = a.rollout.engine.empty() || a.rollout.engine == "areal";
  return cat("generation: ", a.rollout.data, a.rollout.data == 1 ? " replica" : " replicas", " x ", a.rollout.tensor,
             " tensor-parallel ", a.rollout.tensor == 1 ? "rank" : "ranks",
             builtin_name ? "" : cat(" (the built-in engine in the shape of ", a.rollout.engine, ")"),
             "; training: FSDP over ", a.actor.ranks(), a.actor.ranks() == 1 ? " rank" : " ranks",
             a.actor.expert > 1 ? cat(", experts over groups of ", a.actor.expert, " ranks") : std::string(),
             a.actor.sharing() > 1
                 ? cat(" (", a.actor.data, " data-parallel groups of ", a.actor.sharing(), ": ",
                       a.actor.tensor > 1 ? cat(a.actor.tensor, " tensor-parallel ranks") : std::string(),
                       a.actor.tensor > 1 && a.actor.context > 1 ? " x " : "",
                       a.actor.context > 1 ? cat("every sequence over ", a.actor.context, " ranks") : std::string(), ")")
                 : std::string(),
             a.separate ? cat("; separate (asynchronous RL): ranks 0-", a.generation_ranks() - 1, " generate, ranks ",
                              a.generation_ranks(), "-", a.generation_ranks() + a.actor.ranks() - 1, " train")
                        : std::string("; colocated"));
}

}  // namespace areal
