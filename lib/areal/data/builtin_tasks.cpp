#include "areal/data/builtin_tasks.h"

#include <algorithm>
#include <random>
#include <set>

#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

constexpr size_t kArithmeticTestSize = 500;

// Operands written with two digits ("07+45="), so every digit sits at the same place
// in every prompt: a tiny model learns the task in a fixed, short budget.
std::string two_digits(int n) { return cat(n / 10, n % 10); }

std::vector<PromptExample> arithmetic(bool test_split) {
  std::vector<PromptExample> all;
  for (int a = 0; a < 100; ++a)
    for (int b = 0; b < 100; ++b) all.push_back({cat(two_digits(a), "+", two_digits(b), "="), cat(a + b), ""});
  std::mt19937_64 rng(20261130);  // fixed: the split never depends on the run
  std::shuffle(all.begin(), all.end(), rng);
  if (test_split) return {all.begin(), all.begin() + kArithmeticTestSize};
  return {all.begin() + kArithmeticTestSize, all.end()};
}

// The digit-wise sum without carries: 57+68 -> "15".
std::string sum_without_carry(int a, int b) {
  const int units = (a % 10 + b % 10) % 10, tens = (a / 10 + b / 10) % 10;
  return tens > 0 ? cat(tens, units) : cat(units);
}

// The train split as a sloppy teacher answers it: on problems with a carry, the carry
// is forgotten 60% of the time (seeded), so a model trained on it prefers the wrong answer.
std::vector<PromptExample> sloppy_teacher() {
  std::vector<PromptExample> examples = arithmetic(false);
  std::mt19937_64 rng(7);
  std::bernoulli_distribution forgets(0.6);
  for (auto& e : examples) {
    const int a = std::stoi(e.prompt.substr(0, e.prompt.find('+')));
    const int b = std::stoi(e.prompt.substr(e.prompt.find('+') + 1));
    if (forgets(rng)) e.answer = sum_without_carry(a, b);  // equal to the true sum when there is no carry
  }
  return examples;
}

// Three-digit multiplication ("123*456="), too hard for the tiny model in its head and
// easy with the calculator (docs/agentic.md, the tool-use demo). Fixed split, like
// arithmetic's.
std::vector<PromptExample> multiplication(bool test_split) {
  std::vector<PromptExample> all;
  std::set<std::pair<int, int>> drawn;  // no problem twice: the splits are disjoint
  std::mt19937_64 rng(20261203);
  std::uniform_int_distribution<int> operand(100, 999);
  while (all.size() < 10500) {
    const int a = operand(rng), b = operand(rng);
    if (!drawn.insert({a, b}).second) continue;
    all.push_back({cat(a, "*", b, "="), cat(a * b), ""});
  }
  if (test_split) return {all.begin(), all.begin() + kArithmeticTestSize};
  return {all.begin() + kArithmeticTestSize, all.end()};
}

// The train split as a teacher who mostly multiplies in its head (80%, seeded: a wrong
// product with the right leading digits) and sometimes calls the calculator, writing
// "<calc>a*b</calc>", the tool's value, then the answer on a line of its own.
std::vector<PromptExample> tool_teacher() {
  std::vector<PromptExample> examples = multiplication(false);
  std::mt19937_64 rng(11);
  std::bernoulli_distribution in_head(0.8);
  std::uniform_int_distribution<int> slip(1, 99);
  for (auto& e : examples) {
    const std::string call = e.prompt.substr(0, e.prompt.size() - 1);
    if (in_head(rng)) {
      const int product = std::stoi(e.answer);
      int last = slip(rng);
      if (last == product % 100) last = last % 99 + 1;  // a guess is never right
      e.answer = cat(product / 100 * 100 + last);
    } else {
      e.answer = cat("<calc>", call, "</calc>", e.answer, "\n", e.answer);
    }
  }
  return examples;
}

}  // namespace

bool is_builtin_task(const std::string& path) { return starts_with(path, "builtin:"); }

std::vector<PromptExample> builtin_task(const std::string& path) {
  if (path == "builtin:arithmetic/train") return arithmetic(false);
  if (path == "builtin:arithmetic/test") return arithmetic(true);
  if (path == "builtin:arithmetic/sloppy_teacher") return sloppy_teacher();
  if (path == "builtin:multiplication/train") return multiplication(false);
  if (path == "builtin:multiplication/test") return multiplication(true);
  if (path == "builtin:multiplication/tool_teacher") return tool_teacher();
  throw ConfigError(cat("unknown built-in dataset '", path,
                        "' (known: builtin:arithmetic/train, builtin:arithmetic/test, "
                        "builtin:arithmetic/sloppy_teacher, builtin:multiplication/train, "
                        "builtin:multiplication/test, builtin:multiplication/tool_teacher)"));
}

}  // namespace areal
