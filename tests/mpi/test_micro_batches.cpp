// Token-budget micro-batches (actor.mb_spec.max_tokens_per_mb): sequences packed into
// rows without padding, gradients accumulated over micro-batches, must give the loss
// and the gradients of one padded batch of the same sequences (float32; tolerances
// below), with ranks that need different numbers of micro-batches.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include "catch_with_torch.h"

#include "areal/fsdp/policy.h"
#include "areal/fsdp/staged_init.h"
#include "areal/fsdp/micro_batches.h"
#include "mpi_fixture.h"
#include "test_paths.h"

using namespace areal;
using areal::testing::g_comm;
using areal::testing::g_me;

// The llama fixture's policy on every rank, trained in float32.
struct Float32Policy {
  Config cfg = [] {
    Config c;
    c.model_path = source_path("tests/fixtures/models/llama");
    c.device = "cpu";
    c.actor.dtype = "float32";
    c.actor.grad_reduce_dtype = "float32";
    return c;
  }();
  InitResult init = staged_init(cfg, g_me, *g_comm);
  Policy policy{cfg, *init.model, *g_comm};
};

TEST_CASE("micro-batches: first-fit decreasing respects the budget and places every sequence once", "[mpi][micro]") {
  const std::vector<int64_t> lengths = {5, 9, 3, 12, 7, 2, 20};
  auto groups = first_fit_decreasing(lengths, 12);
  std::vector<int> seen(lengths.size(), 0);
  for (const auto& group : groups) {
    int64_t total = 0;
    for (int64_t i : group) {
      ++seen[i];
      total += lengths[i];
    }
    CHECK((total <= 12 || group.size() == 1));  // 20 > 12 goes alone
  }
  for (int n : seen) CHECK(n == 1);
  // Decreasing: 20 alone (over budget), 12, 9+3, 7+5, and 2 fits nowhere else.
  CHECK(groups == std::vector<std::vector<int64_t>>{{6}, {3}, {1, 2}, {0, 4}, {5}});
}

TEST_CASE("micro-batches: packed micro-batches give the loss and gradients of one padded batch", "[mpi][micro]") {
  Float32Policy fixture;
  ShardedModel& model = *fixture.init.model;
  Policy& policy = fixture.policy;

  // Rank r has 3 + 2r sequences of 3..14 tokens: ranks need different numbers of
  // micro-batches, so the ones with fewer run empty ones.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + g_me.rank);
  const int64_t n = 3 + 2 * g_me.rank;
  PaddedSequences set;
  at::Tensor lengths = at::randint(3, 15, {n}, gen, at::kLong);
  const int64_t longest = lengths.max().item<int64_t>();
  set.ids = at::zeros({n, longest}, at::kLong);
  at::Tensor weights = at::zeros({n, longest - 1}, at::kFloat);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t length = lengths[i].item<int64_t>();
    set.ids[i].narrow(0, 0, length).copy_(at::randint(1, model.config().vocab_size, {length}, gen, at::kLong));
    weights[i].narrow(0, 0, length - 1).fill_(1);
    set.lengths.push_back(length);
  }
  at::Tensor all_tokens = weights.sum().to(at::kDouble).reshape({1});
  g_comm->all_reduce(all_tokens, ReduceOp::Sum);

  // One optimizer step's worth: the mean over every target token of all ranks.
  auto run = [&](int64_t max_tokens, size_t& count) {
    for (size_t u = 0; u < model.units().size(); ++u)
      if (model.shard(u).grad().defined()) model.shard(u).mutable_grad().zero_();
    at::Tensor loss = at::zeros({1}, at::kDouble);
    auto mbs = micro_batches(set, 0, n, max_tokens, *g_comm, at::Device("cpu"));
    count = mbs.size();
    for (const MicroBatch& mb : mbs) {
      at::Tensor logits = mb.forward(policy);
      at::Tensor token_loss = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), mb.targets().reshape({-1}), {},
                                                     at::Reduction::None);
      at::Tensor sum = (token_loss * mb.lay_out(weights).reshape({-1})).sum();
      (sum * (g_me.world_size / all_tokens.item<double>())).backward();
      loss += sum.detach().to(at::kDouble);
    }
    g_comm->all_reduce(loss, ReduceOp::Sum);
    std::vector<at::Tensor> grads;
    for (size_t u = 0; u < model.units().size(); ++u) grads.push_back(model.shard(u).grad().clone());
    return std::make_pair(loss.item<double>() / all_tokens.item<double>(), grads);
  };
  size_t padded_count = 0, packed_count = 0;
  auto [padded_loss, padded_grads] = run(0, padded_count);
  auto [packed_loss, packed_grads] = run(16, packed_count);
  CHECK(padded_count == 1);
  CHECK(packed_count >= 2);
  // Tolerances: the same float32 arithmetic in another grouping (per-sequence attention,
  // gradients summed over micro-batches): 1e-6 relative on the loss, 1e-4/1e-6 on grads.
  CHECK(std::abs(packed_loss - padded_loss) <= 1e-6 * std::abs(padded_loss));
  for (size_t u = 0; u < padded_grads.size(); ++u) {
    INFO("unit " << u);
    CHECK(at::allclose(packed_grads[u], padded_grads[u], 1e-4, 1e-6));
  }
  // Every rank ran as many micro-batches as the rank that needed the most.
  at::Tensor counts = at::tensor({static_cast<double>(packed_count)}, at::kDouble);
  at::Tensor most = counts.clone();
  g_comm->all_reduce(most, ReduceOp::Max);
  CHECK(counts.item<double>() == most.item<double>());
}

TEST_CASE("micro-batches: answers sharing their prompt give the loss and gradients of one padded batch",
          "[mpi][micro]") {
  Float32Policy fixture;
  ShardedModel& model = *fixture.init.model;
  Policy& policy = fixture.policy;

  // Per rank 3 groups of 3 answers (1..7 tokens) to prompts of 3..8 tokens, and one row
  // that is its prompt alone (no answer: shares nothing). Targets: the answers' tokens.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(200 + g_me.rank);
  const int64_t groups = 3, answers = 3, n = groups * answers + 1;
  std::vector<at::Tensor> rows;
  std::vector<int64_t> prompt_lengths;
  int64_t shared_tokens = 0;  // what the forward runs when every group shares its prompt
  int64_t largest_group = 0;  // the most tokens of one group, its prompt once
  for (int64_t g = 0; g <= groups; ++g) {
    const int64_t p = at::randint(3, 9, {1}, gen, at::kLong).item<int64_t>();
    const at::Tensor prompt = at::randint(1, model.config().vocab_size, {p}, gen, at::kLong);
    int64_t group_tokens = p;
    for (int64_t a = 0; a < (g < groups ? answers : 1); ++a) {
      const int64_t length = g < groups ? at::randint(1, 8, {1}, gen, at::kLong).item<int64_t>() : 0;
      rows.push_back(at::cat({prompt, at::randint(1, model.config().vocab_size, {length}, gen, at::kLong)}));
      prompt_lengths.push_back(p);
      group_tokens += length;
    }
    shared_tokens += group_tokens;
    largest_group = std::max(largest_group, group_tokens);
  }
  PaddedSequences set;
  int64_t longest = 0;
  for (const at::Tensor& row : rows) longest = std::max(longest, row.numel());
  set.ids = at::zeros({n, longest}, at::kLong);
  at::Tensor weights = at::zeros({n, longest - 1}, at::kFloat);
  int64_t all_lengths = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t length = rows[i].numel(), p = prompt_lengths[i];
    set.ids[i].narrow(0, 0, length).copy_(rows[i]);
    set.lengths.push_back(length);
    all_lengths += length;
    if (length > p) weights[i].narrow(0, p - 1, length - p).fill_(1);
  }
  weights[n - 1][0] = 1;  // the prompt alone: one target of its own
  at::Tensor all_tokens = weights.sum().to(at::kDouble).reshape({1});
  g_comm->all_reduce(all_tokens, ReduceOp::Sum);

  // One optimizer step's worth: the mean over every target token of all ranks, with the
  // head on every position (forward) or on the targets' only (forward_at).
  auto run = [&](const PaddedSequences& sequences, int64_t max_tokens, bool at_targets, int64_t& tokens,
                 size_t& count) {
    for (size_t u = 0; u < model.units().size(); ++u)
      if (model.shard(u).grad().defined()) model.shard(u).mutable_grad().zero_();
    at::Tensor loss = at::zeros({1}, at::kDouble);
    tokens = 0;
    const std::vector<MicroBatch> mbs = micro_batches(sequences, 0, n, max_tokens, *g_comm, at::Device("cpu"));
    count = mbs.size();
    for (const MicroBatch& mb : mbs) {
      const at::Tensor w = mb.lay_out(weights);
      at::Tensor sum;
      if (at_targets) {
        const at::Tensor logits = mb.forward_at(policy, w > 0);
        sum = at::cross_entropy_loss(logits, mb.targets().masked_select(w > 0), {}, at::Reduction::Sum);
      } else {
        const at::Tensor logits = mb.forward(policy);
        sum = (at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), mb.targets().reshape({-1}), {},
                                      at::Reduction::None) *
               w.reshape({-1}))
                  .sum();
      }
      (sum * (g_me.world_size / all_tokens.item<double>())).backward();
      loss += sum.detach().to(at::kDouble);
      if (!mb.rows().empty()) tokens += mb.tokens();  // not a rank's empty filler
    }
    g_comm->all_reduce(loss, ReduceOp::Sum);
    std::vector<at::Tensor> grads;
    for (size_t u = 0; u < model.units().size(); ++u) grads.push_back(model.shard(u).grad().clone());
    return std::make_pair(loss.item<double>() / all_tokens.item<double>(), grads);
  };
  int64_t tokens = 0;
  size_t count = 0;
  auto [padded_loss, padded_grads] = run(set, 0, false, tokens, count);
  PaddedSequences shared = set;
  shared.prompt_lengths = prompt_lengths;
  // A budget that holds every row, and one that holds the largest group (its prompt
  // once) but not all: the groups go to micro-batches whole, so each shares its prompt.
  for (const int64_t max_tokens : {int64_t{1000}, largest_group}) {
    for (const bool at_targets : {false, true}) {
      INFO("max_tokens " << max_tokens << ", head at the targets only " << at_targets);
      auto [loss, grads] = run(shared, max_tokens, at_targets, tokens, count);
      CHECK(tokens == shared_tokens);
      CHECK(tokens < all_lengths);
      if (max_tokens != 1000) CHECK(count >= 2);
      // The padded batch's arithmetic in another grouping: tolerances as above.
      CHECK(std::abs(loss - padded_loss) <= 1e-6 * std::abs(padded_loss));
      for (size_t u = 0; u < padded_grads.size(); ++u) {
        INFO("unit " << u);
        CHECK(at::allclose(grads[u], padded_grads[u], 1e-4, 1e-6));
      }
    }
  }
}
