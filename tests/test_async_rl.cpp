// Asynchronous RL end to end through the real binary: separate generation and
// training ranks (rollout.backend + actor.backend adding up to the world size) against
// the synchronous loop, the staleness bound on every step's samples, and a rank that
// dies. Plus the queue's pieces (the staleness rule, a group's message) alone.
#include "catch_with_torch.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "areal/rl/async_queue.h"
#include "jsonl_rows.h"
#include "run_binary.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using nlohmann::json;
using namespace areal;

namespace {

const std::string kMpirun = mpirun_cmd();
const std::string kSeparate = " rollout.backend=areal:d1t1 actor.backend=fsdp:d1";

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("areal_async_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The CI smoke run (tiny model, float32, GRPO with KL) for `steps` steps on `ranks`
// ranks. A random model earns no reward: a constant advantage of 1 (REINFORCE without
// a baseline) still moves the policy, so every step's figures depend on the last.
Result smoke(int ranks, const fs::path& root, int steps, const std::string& extra, const std::string& env = "") {
  return run(env + " timeout 120 " + kMpirun + " -np " + std::to_string(ranks) + " " + train_bin() +
             " --config configs/ci_smoke.yaml total_train_epochs=3 total_train_steps=" + std::to_string(steps) +
             " actor.reward_bias=1 actor.adv_norm.mean_level=none actor.adv_norm.std_level=none"
             " cluster.fileroot=" + root.string() + extra);
}

std::vector<json> step_rows(const fs::path& root) {
  std::vector<json> steps;
  for (const json& row : read_jsonl(root / "ci-smoke" / "trial0" / "stats.jsonl"))
    if (row.contains("reward_mean")) steps.push_back(row);
  return steps;
}

std::vector<double> eval_scores(const fs::path& root) {
  std::vector<double> scores;
  for (const json& row : read_jsonl(root / "ci-smoke" / "trial0" / "stats.jsonl"))
    if (row.contains("eval_accuracy")) scores.push_back(row["eval_accuracy"].get<double>());
  return scores;
}

}  // namespace

TEST_CASE("async queue: the staleness rule is AReaL's capacity rule", "[async]") {
  // B = 4 groups a step. eta = 0: only the current step's groups may start.
  StalenessRule sync{4, 0, 0};
  CHECK(sync.may_start(3, 0));
  CHECK_FALSE(sync.may_start(4, 0));
  CHECK(sync.may_start(4, 1));
  CHECK(sync.may_start(7, 1));
  CHECK_FALSE(sync.may_start(8, 1));
  // eta = 2: up to two steps ahead of the weights.
  StalenessRule two{4, 2, 0};
  CHECK(two.may_start(11, 0));
  CHECK_FALSE(two.may_start(12, 0));
  // queue_size bounds the groups waiting beyond what the trainers took (v B).
  StalenessRule queue{4, 2, 6};
  CHECK(queue.may_start(5, 0));
  CHECK_FALSE(queue.may_start(6, 0));
  CHECK(queue.may_start(9, 1));
  CHECK_FALSE(queue.may_start(10, 1));
  // A queue_size below B (issue 26, defect 2: the run hung, as groups v B + 1 .. were
  // never allowed to start): the step the trainers collect may always start, nothing more.
  StalenessRule small{4, 1, 1};
  CHECK(small.may_start(3, 0));
  CHECK_FALSE(small.may_start(4, 0));
  CHECK(small.may_start(7, 1));
  CHECK_FALSE(small.may_start(8, 1));
}

TEST_CASE("async queue: a finished group's message round-trips", "[async]") {
  FinishedGroup g;
  g.index = 13;
  g.prompt = 7;
  g.reward_failures = 1;
  g.rewards = {1.0, 0.0};
  g.answers.resize(2);
  g.answers[0].tokens = {5, 6, 2};
  g.answers[0].logprobs = {-0.5f, -1.25f, -0.125f};
  g.answers[0].versions = {3, 3, 4};
  g.answers[1].tokens = {9};
  g.answers[1].logprobs = {-2.0f};
  g.answers[1].versions = {4};
  g.answers[1].truncated = true;
  const FinishedGroup back = decode_group(encode_group(g));
  CHECK(back.index == 13);
  CHECK(back.prompt == 7);
  CHECK(back.reward_failures == 1);
  CHECK(back.rewards == g.rewards);
  REQUIRE(back.answers.size() == 2);
  CHECK(back.answers[0].tokens == g.answers[0].tokens);
  CHECK(back.answers[0].logprobs == g.answers[0].logprobs);
  CHECK(back.answers[0].versions == g.answers[0].versions);
  CHECK_FALSE(back.answers[0].truncated);
  CHECK(back.answers[1].truncated);
  // A cut message is an error, not garbage.
  std::vector<char> bytes = encode_group(g);
  bytes.resize(bytes.size() - 3);
  CHECK_THROWS_WITH(decode_group(bytes), Contains("ended early"));
}

TEST_CASE("async rl: eta = 0 with 1 generation + 1 training rank gives the synchronous run's steps",
          "[async][binary][mpi][slow]") {
  const fs::path root = fresh_dir("eta0");
  // The synchronous loop on one rank trains on the same rank count (1) as the async
  // trainer, so every difference would be the async path's.
  Result sync = smoke(1, root / "sync", 3, "");
  INFO(sync.output);
  REQUIRE(sync.exit_code == 0);
  Result async = smoke(2, root / "async", 3, kSeparate + " rollout.max_head_offpolicyness=0");
  INFO(async.output);
  REQUIRE(async.exit_code == 0);
  CHECK_THAT(async.output, Contains("ranks 0-0 generate, ranks 1-1 train") &&
                               Contains("generates (replica 0, tensor rank 0 of 1)") &&
                               Contains("trains (FSDP rank 0 of 1)") && Contains("step 3/3"));
  const std::vector<json> a = step_rows(root / "async"), s = step_rows(root / "sync");
  REQUIRE(a.size() == 3);
  REQUIRE(s.size() == 3);
  // Same weights (version = step), same prompts, same seeds, one batch either way: the
  // answers are the same token for token, so the figures agree to float32 rounding
  // (tolerance 1e-5 relative; the stats are written with 6+ significant digits).
  for (size_t i = 0; i < 3; ++i) {
    INFO("step " << i + 1);
    for (const char* key : {"reward_mean", "accuracy", "response_length_mean", "truncated_share"})
      CHECK(a[i][key].get<double>() == s[i][key].get<double>());
    for (const char* key : {"loss", "grad_norm", "kl", "entropy", "clip_fraction"})
      CHECK(a[i][key].get<double>() == Approx(s[i][key].get<double>()).epsilon(1e-5).margin(1e-9));
    CHECK(a[i]["staleness_max"].get<double>() == 0);
  }
  // The held-out scores, from the generation rank, equal the synchronous loop's.
  const std::vector<double> async_evals = eval_scores(root / "async"), sync_evals = eval_scores(root / "sync");
  REQUIRE(async_evals.size() == 2);
  CHECK(async_evals == sync_evals);
}

TEST_CASE("async rl: no trained sample is more than eta versions stale", "[async][binary][mpi][slow]") {
  for (int eta : {1, 2}) {
    INFO("eta = " << eta);
    const fs::path root = fresh_dir("eta" + std::to_string(eta));
    // With the decoupled loss, as AReaL runs stale samples. The trainer sleeps 2 s
    // before its second step (util/crash_point.h), so generation surely runs ahead as
    // far as eta lets it.
    Result r = smoke(2, root, 5, kSeparate + " rollout.max_head_offpolicyness=" + std::to_string(eta) +
                                     " actor.use_decoupled_loss=true actor.behav_imp_weight_cap=5",
                     "AREAL_TEST_SLEEP_AT=rl:step2 AREAL_TEST_SLEEP_SECONDS=2");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::vector<json> rows = step_rows(root);
    REQUIRE(rows.size() == 5);
    double most = 0;
    for (const json& row : rows) {
      INFO(row.dump());
      // The largest lag of any answer's first token behind the weights it trained.
      CHECK(row["staleness_max"].get<double>() <= eta);
      CHECK(row["staleness_mean"].get<double>() <= row["staleness_max"].get<double>());
      most = std::max(most, row["staleness_max"].get<double>());
    }
    CHECK(most == eta);  // it did run ahead: the bound is what held it
  }
}

TEST_CASE("async rl: a queue_size below the batch runs (it hung)", "[async][binary][mpi]") {
  // Issue 26, defect 2: queue_size 1 with 4 groups a step let only group v B start, so
  // the trainers waited for the step's other groups forever (timeout's 124 here).
  const fs::path root = fresh_dir("queue1");
  Result r = smoke(2, root, 2, kSeparate + " rollout.max_head_offpolicyness=1 rollout.queue_size=1"
                                           " train_dataset.batch_size=4");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(step_rows(root).size() == 2);
}

TEST_CASE("async rl: only the generation ranks start reward workers", "[async][binary][mpi]") {
  // Issue 26, defect 8: the trainers started a reward_fn command's workers too and never
  // used them. Each worker writes its rank when it starts; one step, one worker a rank.
  const fs::path root = fresh_dir("reward_ranks");
  const fs::path started = root / "started";
  Result r = smoke(2, root, 1, kSeparate + " reward_workers=1 reward_fn=\"command:echo \\$OMPI_COMM_WORLD_RANK >> " +
                                   started.string() + "; while read line; do echo 1; done\"");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(started);
  std::vector<std::string> ranks;
  for (std::string line; std::getline(in, line);) ranks.push_back(line);
  CHECK(ranks == std::vector<std::string>{"0"});  // rank 0 generates, rank 1 trains
}

TEST_CASE("async rl: a generation rank or a trainer that dies ends the job in seconds", "[async][binary][mpi][slow]") {
  for (const char* point : {"async:group5", "rl:step2"}) {
    INFO(point);
    const fs::path root = fresh_dir("killed");
    // As by kill -9 (util/crash_point.h): no destructors, no MPI_Finalize.
    Result r = smoke(2, root, 4, kSeparate + " rollout.max_head_offpolicyness=1", std::string("AREAL_TEST_CRASH_AT=") + point);
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.exit_code != 124);  // not the timeout: the job ended by itself
    CHECK(r.seconds < 30);
  }
}

TEST_CASE("async rl: a generation rank that throws ends the job in seconds, printing its error",
          "[async][binary][mpi][slow]") {
  // Issue 26, defect 4: the generation rank throws as new weights arrive, with a step's
  // groups posted and not yet taken (8 answers of 32 tokens: past MPI's eager size, so
  // they wait for the trainer's receive). Its mailbox's destructor waited for them while
  // the trainer waited in the weights' send: neither moved until timeout's 124.
  const fs::path root = fresh_dir("throws");
  Result r = smoke(2, root, 4, kSeparate + " rollout.max_head_offpolicyness=1 gconfig.n_samples=8 "
                                           "gconfig.max_new_tokens=32",
                   "AREAL_TEST_THROW_AT=async:version1");
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);
  CHECK(r.seconds < 60);
  CHECK_THAT(r.output, Contains("test fault at async:version1"));
}

TEST_CASE("async rl: SIGUSR1 to every process stops the job with a recover checkpoint, and it resumes",
          "[async][binary][mpi][slow]") {
  // Issue 26, defect 3: Slurm signals every process of a step. The generation rank kept
  // the default action and died, so the job ended without a recover checkpoint. Here
  // every areal-train process of this job (the launcher's children) gets SIGUSR1 once the
  // first step is logged (the trainer
  // sleeps 3 s in step 2 so that the signal lands mid-run).
  const fs::path root = fresh_dir("signal");
  const std::string extra = kSeparate + " rollout.max_head_offpolicyness=1 recover.mode=auto";
  const fs::path stats = root / "ci-smoke" / "trial0" / "stats.jsonl";
  Result stopped = run("(AREAL_TEST_SLEEP_AT=rl:step2 AREAL_TEST_SLEEP_SECONDS=3 timeout 120 " + kMpirun +
                       " -np 2 " + train_bin() + " --config configs/ci_smoke.yaml total_train_epochs=3"
                       " total_train_steps=4 actor.reward_bias=1 actor.adv_norm.mean_level=none"
                       " actor.adv_norm.std_level=none cluster.fileroot=" + root.string() + extra +
                       " & job=$!; for i in $(seq 600); do [ -s " + stats.string() + " ] && break; sleep 0.1; done;"
                       " pkill -USR1 -x areal-train -P $(pgrep -d, -P $job); wait $job)");
  INFO(stopped.output);
  CHECK(stopped.exit_code == 75);
  CHECK_THAT(stopped.output, Contains("stopped by SIGUSR1") && Contains("recover: checkpoint after step"));
  const size_t done = step_rows(root).size();
  CHECK(done >= 1);
  CHECK(done < 4);
  Result resumed = smoke(2, root, 4, extra);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("recover: resuming after step " + std::to_string(done)));
  CHECK(step_rows(root).size() == 4);
}

TEST_CASE("async rl: an evaluation longer than cluster.collective_timeout is not a stopped rank",
          "[async][binary][mpi][slow]") {
  // Issue 26, defect 8: one generation rank and two trainers; the generation rank
  // evaluates the weights of step 1 for 8 s with a 3 s collective timeout. The trainer
  // that serves it waited in the weights' send while the other waited in the next
  // unit's watched gather, and the watchdog ended the job as if a rank had stopped.
  const fs::path root = fresh_dir("slow_eval");
  Result r = run("AREAL_TEST_SLEEP_AT=async:eval1 AREAL_TEST_SLEEP_SECONDS=8 timeout 120 " + kMpirun + " -np 3 " +
                 train_bin() + " --config configs/ci_smoke.yaml total_train_epochs=3 total_train_steps=3 evaluator.freq_steps=1"
                 " rollout.backend=areal:d1t1 actor.backend=fsdp:d2 rollout.max_head_offpolicyness=1"
                 " cluster.collective_timeout=3 cluster.fileroot=" + root.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(step_rows(root).size() == 3);
  CHECK(eval_scores(root).size() == 4);  // before training and after each of the 3 steps
}

TEST_CASE("async rl: a run killed at a step resumes from its recover checkpoint (eta = 0: bit-identical)",
          "[async][binary][mpi][slow]") {
  const fs::path root = fresh_dir("resume");
  const std::string extra = kSeparate + " rollout.max_head_offpolicyness=0 recover.mode=auto recover.freq_steps=2";
  Result whole = smoke(2, root / "whole", 4, extra);
  INFO(whole.output);
  REQUIRE(whole.exit_code == 0);
  // The trainer dies at the start of step 3, after the recover checkpoint of step 2.
  Result killed = smoke(2, root / "killed", 4, extra, "AREAL_TEST_CRASH_AT=rl:step3");
  CHECK(killed.exit_code != 0);
  Result resumed = smoke(2, root / "killed", 4, extra);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  // The generation rank starts at the trainers' step, on their weights of that step.
  CHECK_THAT(resumed.output, Contains("recover: resuming after step 2") && Contains("step 3/4") &&
                                 !Contains("step 1/4"));
  const std::vector<json> got = step_rows(root / "killed"), want = step_rows(root / "whole");
  REQUIRE(got.size() == 4);
  REQUIRE(want.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    INFO("step " << i + 1);
    for (const char* key : {"reward_mean", "response_length_mean", "loss", "grad_norm", "kl", "entropy", "lr"})
      CHECK(got[i][key].get<double>() == want[i][key].get<double>());
  }
  CHECK(eval_scores(root / "killed").back() == eval_scores(root / "whole").back());
}

TEST_CASE("async rl: episodes with eta = 0 give the synchronous run's steps", "[async][binary][mpi][slow][episodes]") {
  // A command environment that answers the first turn with a tool message and ends the
  // second with reward 1: every episode is turn, message (loss mask 0), turn.
  const fs::path root = fresh_dir("episodes");
  const std::string env =
      " 'env=command:while read l; do case \"$l\" in *\\\"turn\\\":0*) echo {\\\"message\\\":\\\"again\\\",\\\"role\\\":\\\"tool\\\"};; "
      "*) echo {\\\"done\\\":true,\\\"reward\\\":1};; esac; done' agent_run_args.max_turns=3 agent_run_args.turn_discount=0.5";
  Result sync = smoke(1, root / "sync", 2, env);
  INFO(sync.output);
  REQUIRE(sync.exit_code == 0);
  Result async = smoke(2, root / "async", 2, env + kSeparate + " rollout.max_head_offpolicyness=0");
  INFO(async.output);
  REQUIRE(async.exit_code == 0);
  const std::vector<json> a = step_rows(root / "async"), s = step_rows(root / "sync");
  REQUIRE(a.size() == 2);
  REQUIRE(s.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i + 1);
    CHECK(s[i]["turns_mean"].get<double>() == 2.0);
    CHECK(s[i]["tool_calls_mean"].get<double>() == 1.0);
    CHECK(s[i]["reward_mean"].get<double>() == 0.5);  // 1 x 0.5^(2 - 1)
    CHECK(s[i]["masked_token_share"].get<double>() > 0.0);
    for (const char* key : {"reward_mean", "response_length_mean", "turns_mean", "tool_calls_mean",
                            "masked_token_share", "env_failures", "episodes_ended_by_limit"})
      CHECK(a[i][key].get<double>() == s[i][key].get<double>());
    for (const char* key : {"loss", "grad_norm", "kl", "entropy"})
      CHECK(a[i][key].get<double>() == Approx(s[i][key].get<double>()).epsilon(1e-5).margin(1e-9));
  }
  fs::remove_all(root);
}

TEST_CASE("rl: env_timeout and env_workers through the binary: an environment too slow fails every episode, counted",
          "[binary][mpi][episodes][waits]") {
  // One worker per rank that answers after 2 s, a timeout of 0.3 s: every episode ends
  // with reward 0 at its first turn and is counted in env_failures; the run goes on.
  const fs::path root = fresh_dir("env_timeout");
  Result r = smoke(2, root, 1,
                   " 'env=command:while read l; do sleep 2; echo {\\\"done\\\":true,\\\"reward\\\":1}; done'"
                   " env_workers=1 env_timeout=0.3 agent_run_args.max_turns=2 valid_dataset.path=");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("no reply within 0.3 s"));
  const std::vector<json> rows = step_rows(root);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["env_failures"].get<double>() == rows[0]["prompts"].get<double>() * 2);  // n_samples 2
  CHECK(rows[0]["reward_mean"].get<double>() == 0.0);
  CHECK(rows[0]["turns_mean"].get<double>() == 1.0);
  fs::remove_all(root);
}
