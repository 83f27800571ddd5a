// Micro-batches by token budget (actor.mb_spec.max_tokens_per_mb, AReaL's name).
//
// A minibatch's sequences are trained in micro-batches whose gradients accumulate
// before one optimizer step. Without a budget (0) the minibatch is one micro-batch of
// right-padded rows. With a budget, the sequences are split first-fit decreasing into
// micro-batches of at most max_tokens_per_mb tokens (a longer sequence goes alone),
// and each micro-batch is ONE packed row without padding: positions restart at every
// sequence and attention never crosses sequences, so no compute goes to padding.
// Every rank runs the same number of micro-batches (the most any rank needs; a rank
// with fewer adds empty ones of one token and no loss), so collectives line up.
// With context parallelism (ContextChunk) the rows are padded to a multiple of the
// group (a packed row's padding is a sequence of its own) and a rank runs its chunk of
// every row: forward()'s logits and the laid-out values are that chunk's positions.
// Shared prompts (PaddedSequences::prompt_lengths, RL's groups): a packed micro-batch's
// consecutive rows with the same prompt hold it once; their answers attend to that one
// copy, whose forward and backward run once. Laid-out values keep one position per row
// and token as without sharing; the prompt's positions map to the one copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "areal/dist/communicator.h"
#include "areal/fsdp/policy.h"

namespace areal {

// Right-padded sequences: what micro-batches are cut from.
struct PaddedSequences {
  at::Tensor ids;                // [N, L] on the CPU
  std::vector<int64_t> lengths;  // real tokens of each row
  // A mixture of experts' recorded choices [N, L, sparse layers x k] (int16, -1: none;
  // Policy::forward's `experts`), or undefined.
  at::Tensor experts;
  // Each row's prompt tokens, to share a prompt between the rows that have it (packed
  // micro-batches without context parallelism or recorded experts); empty: no sharing.
  std::vector<int64_t> prompt_lengths;
};

// One micro-batch. "Target tensors" are the set's [N, L - 1] per-row values aligned with
// the targets (position t predicts token t + 1): loss masks, old log-probs, advantages,
// the targets themselves. lay_out() gives them in this micro-batch's shape [R, W], the
// shape of forward()'s logits without the vocabulary; positions without a target
// (padding, the last token of a packed sequence) get 0.
class MicroBatch {
 public:
  MicroBatch(const PaddedSequences& set, std::vector<int64_t> rows, bool packed, const at::Device& device,
             ContextChunk context = {});

  // Logits [R, W, vocab] for this micro-batch on `weights`. Collective, like
  // Policy::forward (`loss_share`: its share of the update's loss, as there).
  at::Tensor forward(Policy& policy, PolicyWeights weights = PolicyWeights::current, double loss_share = 0) const;
  // The same with the head on the positions `mask` marks only ([R, W] laid out, true:
  // a position with a loss): logits [P, vocab], the marked positions in row-major order
  // (spread() puts per-position values back). The head's work on the others is saved.
  at::Tensor forward_at(Policy& policy, const at::Tensor& mask, PolicyWeights weights = PolicyWeights::current,
                        double loss_share = 0) const;
  // Values [P] at forward_at's positions as [R, W], 0 elsewhere (differentiable).
  static at::Tensor spread(const at::Tensor& mask, const at::Tensor& values);
  at::Tensor lay_out(const at::Tensor& target_values) const;
  // The inverse: laid-out values [R, W] written back into the set's [N, L - 1] `out`.
  void put_back(const at::Tensor& laid_out, at::Tensor& out) const;
  // The targets, laid out (token t + 1 at position t; 0 where there is none).
  at::Tensor targets() const { return lay_out(targets_); }
  const std::vector<int64_t>& rows() const { return rows_; }  // the set's rows, in order
  // The tokens the forward runs on this rank (fewer than the rows' when prompts are shared).
  int64_t tokens() const { return ids_.numel(); }

 private:
  // The packed row with shared prompts: `pieces` (its tokens), segments_, prefixes_ and
  // source_ (left undefined, with segments_ and prefixes_ empty, where no row shares).
  void pack_shared_prompts(const PaddedSequences& set, std::vector<at::Tensor>& pieces);
  // The policy's forward on this micro-batch's input [R, T] (the head on `head_rows`).
  at::Tensor run(Policy& policy, PolicyWeights weights, double loss_share, const at::Tensor& head_rows) const;

  std::vector<int64_t> rows_;
  std::vector<int64_t> lengths_;  // of rows_
  // The packed row's sequences as attention sees them (shared prompts: a prompt, then
  // its answers, each continuing it: prefixes_, packed_attention_inputs).
  std::vector<int64_t> segments_, prefixes_;
  at::Tensor source_;  // shared prompts: each laid-out position's forward position [W] on device_; else undefined
  bool packed_;
  at::Device device_;
  ContextChunk context_;
  at::Tensor whole_ids_;  // [R, T] on device_: the rows (with context parallelism padded to a multiple of it)
  at::Tensor ids_;        // what this rank runs: whole_ids_, or its chunk of them
  at::Tensor experts_;  // [R, T, sparse layers x k] on the CPU, or undefined
  at::Tensor targets_;  // the set's [N, L - 1] targets
  int64_t width_ = 0;   // W
  int64_t first_ = 0;   // the row position of laid-out column 0 (this rank's chunk)
};

// Whether packed micro-batches of `set` share its rows' prompts: prompt lengths given,
// no context parallelism, no recorded experts (else its rows stay unshared).
bool shares_prompts(const PaddedSequences& set, const ContextChunk& context);

// Groups of `lengths` indices, each summing to at most max_tokens (a longer sequence
// alone), first-fit decreasing; groups in creation order, indices ascending in each.
std::vector<std::vector<int64_t>> first_fit_decreasing(const std::vector<int64_t>& lengths, int64_t max_tokens);

// The micro-batches of rows [begin, end) of `set`: one padded micro-batch when
// max_tokens is 0, else packed ones by token budget, as many on every rank (a
// collective then). With shared prompts a run of rows with one prompt is packed as one
// item of its shared tokens (cut where it would pass the budget), so its rows share.
std::vector<MicroBatch> micro_batches(const PaddedSequences& set, int64_t begin, int64_t end, int64_t max_tokens,
                                      Communicator& comm, const at::Device& device, ContextChunk context = {});

}  // namespace areal
