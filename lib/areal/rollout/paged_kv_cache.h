// The KV cache of generation, paged as vLLM pages it.
//
// Per layer one pool of fixed-size blocks for the keys and one for the values
// ([blocks, kBlockTokens, kv_heads, head_dim], allocated once), and per row of the
// batch a table of the blocks its tokens sit in. A row takes blocks from the free list
// as it grows and gives them back when its answer ends, so a finished answer leaves the
// batch, and a waiting one takes its place, without copying any other row's cache;
// nothing grows by concatenation or is copied out per query head (decoding attention
// reads the blocks in place, paged_attention.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "areal/rollout/rollout_model.h"

namespace areal {

// One forward's place in the cache: each token's position, where each new token's key
// and value go, and what decoding attention reads.
struct CacheStep {
  at::Tensor positions;       // [B, T] each token's position in its row (rotary), on the device
  at::Tensor write_slots;     // [real tokens] pool slot (block * kBlockTokens + offset) of each
  at::Tensor real_tokens;     // [real tokens] index b * T + t of each in the step; undefined: all real
  bool prefill = false;       // the rows were empty: attention within the step's own tokens
  // Several tokens appended to rows that hold some (an episode's next turn after its
  // environment's message): per row, the slots of all its tokens after the step.
  std::vector<at::Tensor> row_slots;
  std::vector<int64_t> starts;  // each row's length before the step
  at::Tensor tables;          // decoding: [B, most blocks] the rows' block tables (int64)
  at::Tensor lengths;         // decoding: [B] the rows' lengths after the step (int64)
  int64_t longest = 0;        // the largest of them
};

class PagedKvCache {
 public:
  static constexpr int64_t kBlockTokens = 16;

  // A pool for `rows` rows of up to `row_capacity` tokens each, on the model's device in
  // its dtype, for this rank's key/value heads.
  PagedKvCache(const RolloutModel& model, int64_t rows, int64_t row_capacity);

  int64_t bytes() const;  // the pools'
  int64_t rows() const { return static_cast<int64_t>(tables_.size()); }
  int64_t length(int64_t row) const { return lengths_.at(static_cast<size_t>(row)); }

  // `n` empty rows after the others.
  void add_rows(int64_t n);
  // Keeps rows `keep` (ascending), in that order; the others' blocks go back to the pool.
  void keep_rows(const std::vector<int64_t>& keep);
  // Each empty row to[i] takes blocks of its own holding a copy of row from[i]'s tokens
  // (answers to one prompt: one prefill, then copies of its keys and values).
  void copy_rows(const std::vector<int64_t>& from, const std::vector<int64_t>& to);

  // A forward that appends counts[b] tokens to row rows[b] (its batch right-padded to
  // `width` tokens): a prefill of empty rows, one token per row (decoding), or several
  // tokens to rows that hold some (an episode's environment message). Takes the blocks
  // the rows grow into.
  CacheStep begin(const std::vector<int64_t>& rows, const std::vector<int64_t>& counts, int64_t width);
  // Layer `layer`'s attention in `step`: stores k, v ([B, kv_heads, T, head_dim]) of the
  // real tokens and returns the attention of q ([B, heads, T, head_dim]).
  at::Tensor attend(size_t layer, const CacheStep& step, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v);

 private:
  at::Tensor attend_appended(const CacheStep& step, const at::Tensor& q, const at::Tensor& key_pool,
                             const at::Tensor& value_pool, int64_t window) const;

  at::Device device_;
  ModelConfig config_;                       // the attention's scale and soft-capping
  std::vector<at::Tensor> keys_, values_;    // per layer
  std::vector<int64_t> free_blocks_;         // a stack
  std::vector<std::vector<int64_t>> tables_;  // per row
  std::vector<int64_t> lengths_;             // per row
};

}  // namespace areal
