#include "areal/config/allocation.h"

#include <charconv>

#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {

AllocationMode parse_allocation_mode(const std::string& text) {
  if (text == "static") return {};
  auto refuse = [&](const std::string& why) -> AllocationMode {
    throw ConfigError(cat("option 'allocation_mode': '", text, "' ", why,
                          " (accepted: static, fsdp:dN, dN; e.g. fsdp:d4)"));
  };
  if (text.find('+') != std::string::npos)
    return refuse("names separate inference servers; areal-train generates with its own ranks, so give only the "
                  "training side");
  std::string body = starts_with(text, "fsdp:") ? text.substr(5) : text;
  if (body.size() < 2 || body[0] != 'd') return refuse("is not an allocation mode");
  int64_t n = 0;
  auto [end, ec] = std::from_chars(body.data() + 1, body.data() + body.size(), n);
  if (ec != std::errc() || end != body.data() + body.size())
    return refuse(body.find_first_of("pt") != std::string::npos
                      ? "uses pipeline or tensor parallelism, which areal-train does not have"
                      : "is not an allocation mode");
  if (n < 1) return refuse("needs at least one data-parallel rank");
  return {false, n};
}

void check_allocation_against_world(const AllocationMode& mode, const std::string& text, int world_size) {
  if (mode.is_static || mode.data_parallel == world_size) return;
  throw ConfigError(cat("option 'allocation_mode': '", text, "' asks for ", mode.data_parallel,
                        " data-parallel ranks but the job has ", world_size,
                        " (launch with mpirun -np ", mode.data_parallel, ", or set allocation_mode=static)"));
}

}  // namespace areal
