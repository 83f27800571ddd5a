// Verifiable rewards: answer extraction and numeric equality, case by case.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "areal/reward/reward.h"
#include "areal/reward/worker_pool.h"
#include "areal/util/error.h"
#include "run_python.h"
#include "test_paths.h"

using namespace areal;

TEST_CASE("math answers are extracted from boxes, GSM8K markers or the last number", "[reward]") {
  CHECK(extract_math_answer("so x = 3, hence \\boxed{\\frac{1}{2}}.") == std::optional<std::string>("\\frac{1}{2}"));
  CHECK(extract_math_answer("\\boxed{1} then \\boxed{ 2 }") == std::optional<std::string>("2"));
  CHECK(extract_math_answer("She pays 5 + 7 = 12 dollars.\n#### 12") == std::optional<std::string>("12"));
  CHECK(extract_math_answer("It costs 1,250.50 in total, up from 900.") == std::optional<std::string>("900"));
  CHECK(extract_math_answer("the result is -3/4") == std::optional<std::string>("-3/4"));
  CHECK_FALSE(extract_math_answer("no digits here").has_value());
  CHECK_FALSE(extract_math_answer("\\boxed{unbalanced").has_value());  // no closing brace, no number
}

TEST_CASE("numbers are equal by value, whatever their spelling", "[reward]") {
  CHECK(math_answers_equal("0.5", "1/2"));
  CHECK(math_answers_equal("\\frac{1}{2}", "0.50"));
  CHECK(math_answers_equal("\\dfrac{3}{4}", "3/4"));
  CHECK(math_answers_equal("1,000", "1000"));
  CHECK(math_answers_equal("$42", "42."));
  CHECK(math_answers_equal("-2.5", "-5/2"));
  CHECK_FALSE(math_answers_equal("3", "4"));
  CHECK_FALSE(math_answers_equal("1/3", "0.33"));
  CHECK_FALSE(math_answers_equal("1/0", "0"));
  CHECK(math_answers_equal("x+1", " x+1 "));  // not numbers: compared as written
  // What a final answer carries besides its value (found by the math-verify corpus below).
  CHECK(math_answers_equal("70 \\text{ cm}", "70"));
  CHECK(math_answers_equal("x = -6", "-6"));
  CHECK(math_answers_equal("68{,}941", "68941"));
  CHECK(math_answers_equal("1\\,000", "1000"));
  CHECK_FALSE(math_answers_equal("x = 7", "6"));
  CHECK(parse_math_number("12,345.5") == std::optional<double>(12345.5));
  CHECK_FALSE(parse_math_number("12a").has_value());
  // Closed forms by value, as math-verify judges them (found by the real-looking corpus).
  CHECK(math_answers_equal("\\sqrt{20}", "2\\sqrt{5}"));
  CHECK(math_answers_equal("11\\sqrt2", "11\\sqrt{2}"));
  CHECK(math_answers_equal("\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}"));
  CHECK(math_answers_equal("2^{10}", "1024"));
  CHECK(math_answers_equal("\\sqrt[3]{8}", "2"));
  CHECK(math_answers_equal("2 \\cdot 3", "6"));
  CHECK(math_answers_equal("4\\frac{2}{3}", "\\frac{14}{3}"));   // a mixed number
  CHECK(math_answers_equal("-4\\frac{2}{3}", "-14/3"));
  CHECK(math_answers_equal("2\\frac{\\pi}{3}", "\\frac{2\\pi}{3}"));  // not mixed: a product
  CHECK(math_answers_equal("\\frac12", "0.5"));
  CHECK(math_answers_equal("5\\%", "0.05"));
  CHECK(math_answers_equal("5\\%", "5"));
  CHECK(math_answers_equal("\\$32,\\!348", "32348"));
  CHECK(math_answers_equal("90^\\circ", "90"));
  CHECK_FALSE(math_answers_equal("\\pi", "3.14"));
  CHECK_FALSE(math_answers_equal("5\\%", "0.5"));
  // Tuples and intervals keep order and brackets; lists and sets do not.
  CHECK(math_answers_equal("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"));
  CHECK_FALSE(math_answers_equal("(1, 2)", "(2, 1)"));
  CHECK_FALSE(math_answers_equal("(-2, 7)", "[-2,7]"));
  CHECK(math_answers_equal("x \\in [-2, 7]", "[-2,7]"));
  CHECK(math_answers_equal("3, 2", "2, 3"));
  CHECK(math_answers_equal("\\{1, 2\\}", "2,1"));
  CHECK_FALSE(math_answers_equal("2, 4", "2, 3"));
  CHECK_FALSE(math_answers_equal("(1)+(2)", "(1)"));
  // Words and expressions as written, without spaces or a \text{} wrapper.
  CHECK(math_answers_equal("\\text{(C)}", "(C)"));
  CHECK_FALSE(math_answers_equal("\\text{(B)}", "(C)"));
  CHECK(math_answers_equal("6 - 5i", "6-5i"));
  CHECK_FALSE(math_answers_equal("x^2+7x+12", "x^2 + 7x + 10"));
}

TEST_CASE("reward functions by name", "[reward]") {
  RewardFn math = reward_function("math");
  CHECK(math("Adding up gives \\boxed{0.5}", "#### 1/2") == 1.0);
  CHECK(math("The answer is 1,000", "1000") == 1.0);
  CHECK(math("The answer is 999", "1000") == 0.0);
  CHECK(math("I do not know", "7") == 0.0);
  RewardFn exact = reward_function("exact_match");
  CHECK(exact(" 58\n", "58") == 1.0);
  CHECK(exact("57", "58") == 0.0);
  CHECK_THROWS_AS(reward_function("bleu"), ConfigError);
  CHECK_THROWS_WITH(reward_function("bleu"), Catch::Matchers::Contains("exact_match, math"));
}

TEST_CASE("a reward function that throws scores that answer 0 and is counted", "[reward]") {
  RewardFn picky = [](const std::string& answer, const std::string&) -> double {
    if (answer == "boom") throw std::runtime_error("cannot parse");
    return 1.0;
  };
  int64_t failures = 0;
  CHECK(reward_or_zero(picky, "42", "42", failures) == 1.0);
  CHECK(reward_or_zero(picky, "boom", "42", failures) == 0.0);
  CHECK(reward_or_zero(picky, "boom", "42", failures) == 0.0);
  CHECK(failures == 2);
}

namespace {

// A call for `answer` to a prompt whose dataset row is `row_json` ("" for a built-in task).
struct Item {
  PromptExample example;
  std::string answer;
};

std::vector<double> score_items(Rewarder& rewarder, const std::vector<Item>& items, int64_t& failures) {
  std::vector<RewardCall> calls;
  for (const Item& item : items) calls.push_back({&item.example, item.answer, {1, 2}, {3}});
  return rewarder.score(calls, failures);
}

const std::string kRewards = source_path("tests/fixtures/rewards/");

}  // namespace

TEST_CASE("reward commands read AReaL's reward_fn arguments as one JSON line", "[reward]") {
  const PromptExample row{"What is 2+3?", "5", R"({"question": "What is 2+3?", "answer": "#### 5", "level": 1})"};
  const nlohmann::json request = nlohmann::json::parse(reward_request_json({&row, "It is 5.", {7, 8}, {9}}));
  CHECK(request["prompt"] == "What is 2+3?");
  CHECK(request["completions"] == "It is 5.");
  CHECK(request["prompt_ids"] == nlohmann::json::array({7, 8}));
  CHECK(request["completion_ids"] == nlohmann::json::array({9}));
  CHECK(request["answer"] == "#### 5");  // the dataset's fields as they are
  CHECK(request["level"] == 1);
  const PromptExample builtin{"1+1=", "2", ""};  // a built-in task: its reference as `answer`
  CHECK(nlohmann::json::parse(reward_request_json({&builtin, "2", {}, {}}))["answer"] == "2");
  // Bytes that are not UTF-8 (a model may emit them) are replaced, not an error.
  CHECK_NOTHROW(nlohmann::json::parse(reward_request_json({&builtin, std::string("\xff\xfe", 2), {}, {}})));
}

// The example worker with Hugging Face math-verify against the built-in `math` reward
// (an independent implementation) on GSM8K-style answers, scored by a pool of 2.
TEST_CASE("a Python reward command scores GSM8K answers as the built-in math reward does", "[reward][python]") {
  auto gsm8k = [](std::string answer, std::string reference) {
    return Item{{"question", reference, nlohmann::json{{"question", "q"}, {"answer", reference}}.dump()}, answer};
  };
  const std::vector<Item> items = {gsm8k("3 boxes of 12 is 36, minus 9 is 27.\n#### 27", "36 - 9 = 27\n#### 27"),
                                   gsm8k("The answer is \\boxed{150}.", "60 * 2.5 = 150\n#### 150"),
                                   gsm8k("I think it is 9.", "120 / 15 = 8\n#### 8"),
                                   gsm8k("Total: 1,250", "#### 1250"),
                                   gsm8k("It is 1/2", "#### 0.5"),
                                   gsm8k("no idea", "#### 4")};
  Rewarder command("command:" + python_bin() + " " + source_path("scripts/rewards/worker.py") + " " +
                       source_path("scripts/rewards/gsm8k.py") + ":gsm8k_reward_fn",
                   2, 60);
  Rewarder builtin("math", 1, 60);
  int64_t command_failures = 0, builtin_failures = 0;
  const std::vector<double> got = score_items(command, items, command_failures);
  const std::vector<double> want = score_items(builtin, items, builtin_failures);
  CHECK(got == want);
  CHECK(want == std::vector<double>{1, 1, 0, 1, 1, 0});
  CHECK(command_failures == 0);
}

TEST_CASE("a reward command that hangs, crashes or answers garbage scores 0 and is restarted", "[reward][waits]") {
  auto item = [](const std::string& answer) { return Item{{"p", "r", ""}, answer}; };
  const std::vector<Item> items = {item("fine"), item("SLEEP"), item("fine"), item("CRASH"), item("GARBAGE"),
                                   item("fine")};
  Rewarder rewarder("command:sh " + kRewards + "flaky.sh", 2, 1.0);
  int64_t failures = 0;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<double> got = score_items(rewarder, items, failures);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(got == std::vector<double>{0.5, 0, 0.5, 0, 0, 0.5});
  CHECK(failures == 3);
  CHECK(seconds < 10);  // the hung one waited its 1 s timeout, not its 30 s sleep
  // The restarted workers serve the next batch as before.
  failures = 0;
  CHECK(score_items(rewarder, {item("a"), item("b"), item("c")}, failures) == std::vector<double>{0.5, 0.5, 0.5});
  CHECK(failures == 0);
}

namespace {

// Whether `pid` still runs: a zombie (killed, waiting for a parent that may never reap
// it in a container) counts as gone.
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// Whether `pid` ends within 2 s: SIGKILL is delivered when the process next runs, which
// on a loaded machine may be a moment after kill() returned. (Without the group kill the
// process sleeps on for 300 s.)
bool ends_soon(pid_t pid) {
  for (int i = 0; i < 200 && running(pid); ++i) usleep(10000);
  return !running(pid);
}

bool any_line(const std::string&) { return true; }

std::vector<pid_t> pids_in(const std::filesystem::path& file) {
  std::vector<pid_t> pids;
  std::ifstream in(file);
  for (pid_t pid; in >> pid;) pids.push_back(pid);
  return pids;
}

}  // namespace

TEST_CASE("a timed-out reward worker is killed with everything it started", "[reward][waits]") {
  // Issue 26, defect 6: SIGKILL went to /bin/sh alone, and a compound command's
  // grandchildren (here a `sleep 300` under an inner shell) ran on after the job.
  const std::filesystem::path pids = std::filesystem::temp_directory_path() /
                                     ("areal_reward_pids_" + std::to_string(::getpid()));
  std::filesystem::remove(pids);
  {
    WorkerPool workers("reward command", "sh -c 'sleep 300 & echo $! >> " + pids.string() + "; wait'; true", 1, 1.0,
                       any_line);
    const auto replies = workers.call_all({"{}"});
    REQUIRE(replies.size() == 1);
    CHECK_FALSE(replies[0].has_value());  // timed out: failed
    CHECK(workers.restarts() == 1);
    // The replaced worker's sleep is gone already; the new one's runs until the pool ends.
    for (int i = 0; i < 100 && pids_in(pids).size() < 2; ++i) usleep(20000);
    const std::vector<pid_t> started = pids_in(pids);
    REQUIRE(started.size() == 2);
    CHECK(ends_soon(started[0]));
    CHECK(running(started[1]));
  }
  const std::vector<pid_t> started = pids_in(pids);
  REQUIRE(started.size() == 2);
  for (pid_t pid : started) {
    INFO("sleep " << pid);
    CHECK(ends_soon(pid));
  }
  std::filesystem::remove(pids);
}

TEST_CASE("reward workers do not take the job's stop signals", "[reward]") {
  // Issue 26, defect 3: Slurm signals every process of a step before its end; a worker
  // that died of it scored the rest of the step's answers 0. SIGUSR1 and SIGTERM sent
  // to a worker's process group change nothing: it answers as before.
  const std::filesystem::path pids = std::filesystem::temp_directory_path() /
                                     ("areal_reward_group_" + std::to_string(::getpid()));
  std::filesystem::remove(pids);
  WorkerPool workers("reward command", "echo $$ >> " + pids.string() + "; while read line; do echo 1; done", 1, 5.0,
                     any_line);
  for (int i = 0; i < 100 && pids_in(pids).empty(); ++i) usleep(20000);
  REQUIRE(pids_in(pids).size() == 1);
  const pid_t worker = pids_in(pids)[0];
  CHECK(::getpgid(worker) == worker);     // a group of its own: not the job's
  CHECK(::getpgid(worker) != ::getpgid(0));
  ::kill(-worker, SIGUSR1);
  ::kill(-worker, SIGTERM);
  usleep(200000);
  const auto replies = workers.call_all({"{}", "{}"});
  REQUIRE(replies.size() == 2);
  CHECK((replies[0] && *replies[0] == "1"));
  CHECK((replies[1] && *replies[1] == "1"));
  CHECK(workers.restarts() == 0);
  std::filesystem::remove(pids);
}

TEST_CASE("a reward command that cannot run is a config error before anything loads", "[reward]") {
  CHECK_THROWS_AS(Rewarder("command:sh -c 'exit 7'", 2, 5), ConfigError);
  CHECK_THROWS_WITH(Rewarder("command:sh -c 'exit 7'", 2, 5), Catch::Matchers::Contains("exited with status 7"));
  CHECK_THROWS_WITH(Rewarder("command:", 1, 5), Catch::Matchers::Contains("names no command"));
  CHECK_THROWS_WITH(Rewarder("bleu", 1, 5), Catch::Matchers::Contains("command:<shell command>"));
}

namespace {

// The built-in `math` reward on pairs judged by Hugging Face math-verify (an independent
// implementation; tests/python/math_verify_corpus.py writes its verdicts as JSONL).
// Prints every disagreement and the share that agree.
struct Agreement {
  int pairs = 0, agree = 0, correct = 0;  // correct: by math-verify
  std::vector<std::string> disagreements;  // the answers
};
Agreement agreement_with_math_verify(const std::string& judged, const char* corpus) {
  const RewardFn math = reward_function("math");
  Agreement a;
  std::istringstream lines(judged);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;  // math-verify's own warnings
    const nlohmann::json row = nlohmann::json::parse(line);
    const double ours = math(row["answer"].get<std::string>(), row["reference"].get<std::string>());
    const int theirs = row["math_verify"].get<int>();
    ++a.pairs;
    a.correct += theirs;
    if ((ours > 0) == (theirs > 0)) {
      ++a.agree;
    } else {
      a.disagreements.push_back(row["answer"].get<std::string>());
      std::cout << corpus << ": math reward disagrees with math-verify (ours " << ours << ", math-verify " << theirs
                << "): answer " << row["answer"].dump() << ", reference " << row["reference"].dump() << "\n";
    }
  }
  std::cout << corpus << ": math reward vs math-verify: " << a.agree << " of " << a.pairs << " pairs agree ("
            << a.correct << " correct by math-verify)\n";
  return a;
}

}  // namespace

// On a corpus of GSM8K- and MATH-style pairs that tests/python/math_verify_corpus.py
// writes and judges. docs/rl.md says why each kind of disagreement happened.
TEST_CASE("the built-in math reward agrees with math-verify on 1200 GSM8K and MATH style pairs", "[reward][python]") {
  const PythonResult corpus = run_python("math_verify_corpus.py 1200 7");
  INFO(corpus.output.substr(0, 2000));
  REQUIRE(corpus.exit_code == 0);
  const Agreement a = agreement_with_math_verify(corpus.output, "generated corpus");
  REQUIRE(a.pairs == 1200);
  CHECK(a.correct > 300);  // both verdicts are well represented
  CHECK(a.correct < 900);
  CHECK(a.agree >= 0.99 * a.pairs);
}

// On hand-written solutions as models write them to MATH-500 and GSM8K problems
// (tests/fixtures/math/real_answers.jsonl: intervals, tuples, choices, radicals, pi,
// degrees, dollars, percents, complex numbers, mixed numbers, bases, GSM8K's own
// references with their <<calculator>> notes), right and wrong. The answers where the
// two disagree are listed here and in docs/evaluation.md; a change on either side fails.
TEST_CASE("the built-in math reward against math-verify on real-looking MATH-500 and GSM8K answers", "[reward][python]") {
  const PythonResult judged = run_python("math_verify_corpus.py --file " +
                                         source_path("tests/fixtures/math/real_answers.jsonl"));
  INFO(judged.output.substr(0, 2000));
  REQUIRE(judged.exit_code == 0);
  const Agreement a = agreement_with_math_verify(judged.output, "real-looking answers");
  REQUIRE(a.pairs == 73);
  CHECK(a.correct > 25);
  CHECK(a.correct < 60);
  // math-verify compares polynomials symbolically; the built-in grader as written.
  const std::vector<std::string> known = {"Collecting terms, $\\boxed{10 + 7x + x^2}$."};
  CHECK(a.disagreements == known);
}
