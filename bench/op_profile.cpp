#include "op_profile.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string_view>

namespace areal::bench {
namespace {

using Clock = std::chrono::steady_clock;

bool g_on = false;
std::map<std::string, double> g_seconds;
thread_local int t_depth = 0;

struct OpStart : at::ObserverContext {
  Clock::time_point start = Clock::now();
};

// The autograd engine's frames around a backward node (and the node's own) stand for no
// work of their own: the operations inside them count as top level.
bool is_autograd_frame(const at::RecordFunction& fn) {
  const std::string_view name = fn.name();
  return name.rfind("autograd::", 0) == 0 || name.rfind("torch::autograd::", 0) == 0 ||
         (name.find("Backward") != std::string_view::npos && name.find("::") == std::string_view::npos);
}

std::unique_ptr<at::ObserverContext> enter_op(const at::RecordFunction& fn) {
  if (!g_on || is_autograd_frame(fn) || t_depth++ > 0) return nullptr;
  return std::make_unique<OpStart>();
}

void exit_op(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (!g_on || is_autograd_frame(fn)) return;
  --t_depth;
  if (context)
    g_seconds[fn.name()] +=
        std::chrono::duration<double>(Clock::now() - static_cast<OpStart*>(context)->start).count();
}

}  // namespace

void install_op_profile() {
  static const bool installed = [] {
    at::addGlobalCallback(
        at::RecordFunctionCallback(enter_op, exit_op).scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
    return true;
  }();
  (void)installed;
}

void record_ops(bool on) {
  if (on) g_seconds.clear();
  t_depth = 0;
  g_on = on;
}

const std::map<std::string, double>& op_seconds() { return g_seconds; }

std::vector<std::pair<double, std::string>> ranked_ops() {
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [name, seconds] : g_seconds) ranked.push_back({seconds, name});
  std::sort(ranked.rbegin(), ranked.rend());
  return ranked;
}

}  // namespace areal::bench
