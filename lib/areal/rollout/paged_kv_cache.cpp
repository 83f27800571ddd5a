#include "areal/rollout/paged_kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "areal/model/functional.h"
#include "areal/rollout/paged_attention.h"
#include "areal/util/strings.h"

namespace areal {

PagedKvCache::PagedKvCache(const RolloutModel& model, int64_t rows, int64_t row_capacity)
    : device_(model.options().device()), config_(model.config()) {
  const ModelConfig& c = model.config();
  const int64_t blocks = rows * ((row_capacity + kBlockTokens - 1) / kBlockTokens);
  // Empty, not zeros: attention reads only the tokens a row has written.
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    keys_.push_back(at::empty({blocks, kBlockTokens, model.local_kv_heads(), c.head_dim}, model.options()));
    values_.push_back(at::empty({blocks, kBlockTokens, model.local_kv_heads(), c.head_dim}, model.options()));
  }
  for (int64_t b = blocks - 1; b >= 0; --b) free_blocks_.push_back(b);  // block 0 handed out first
}

int64_t PagedKvCache::bytes() const {
  int64_t total = 0;
  for (size_t i = 0; i < keys_.size(); ++i) total += keys_[i].nbytes() + values_[i].nbytes();
  return total;
}

void PagedKvCache::add_rows(int64_t n) {
  tables_.resize(tables_.size() + static_cast<size_t>(n));
  lengths_.resize(lengths_.size() + static_cast<size_t>(n), 0);
}

void PagedKvCache::keep_rows(const std::vector<int64_t>& keep) {
  std::vector<std::vector<int64_t>> tables;
  std::vector<int64_t> lengths;
  size_t next = 0;
  for (size_t r = 0; r < tables_.size(); ++r) {
    if (next < keep.size() && keep[next] == static_cast<int64_t>(r)) {
      tables.push_back(std::move(tables_[r]));
      lengths.push_back(lengths_[r]);
      ++next;
    } else {
      free_blocks_.insert(free_blocks_.end(), tables_[r].rbegin(), tables_[r].rend());
    }
  }
  if (next != keep.size()) throw std::logic_error("PagedKvCache::keep_rows: rows not ascending or out of range");
  tables_ = std::move(tables);
  lengths_ = std::move(lengths);
}

void PagedKvCache::copy_rows(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() != to.size()) throw std::logic_error("PagedKvCache::copy_rows: as many rows to copy as copies");
  std::vector<int64_t> source_blocks, target_blocks;
  for (size_t i = 0; i < from.size(); ++i) {
    const std::vector<int64_t>& source = tables_.at(from[i]);
    std::vector<int64_t>& target = tables_.at(to[i]);
    if (lengths_.at(to[i]) != 0) throw std::logic_error(cat("PagedKvCache::copy_rows: row ", to[i], " is not empty"));
    for (int64_t block : source) {
      if (free_blocks_.empty())
        throw std::logic_error(cat("PagedKvCache: no free block to copy row ", from[i], " into row ", to[i]));
      target.push_back(free_blocks_.back());
      free_blocks_.pop_back();
      source_blocks.push_back(block);
      target_blocks.push_back(target.back());
    }
    lengths_[to[i]] = lengths_[from[i]];
  }
  if (source_blocks.empty()) return;
  const at::Tensor sources = at::tensor(source_blocks, at::kLong).to(device_);
  const at::Tensor targets = at::tensor(target_blocks, at::kLong).to(device_);
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    keys_[layer].index_copy_(0, targets, keys_[layer].index_select(0, sources));
    values_[layer].index_copy_(0, targets, values_[layer].index_select(0, sources));
  }
}

CacheStep PagedKvCache::begin(const std::vector<int64_t>& rows, const std::vector<int64_t>& counts, int64_t width) {
  CacheStep step;
  const int64_t batch = static_cast<int64_t>(rows.size());
  step.prefill = std::all_of(rows.begin(), rows.end(), [&](int64_t r) { return lengths_.at(r) == 0; });
  const bool appends = !step.prefill && width != 1;

  at::Tensor positions = at::empty({batch, width}, at::kLong);
  auto position = positions.accessor<int64_t, 2>();
  std::vector<int64_t> slots, real;
  bool all_real = true;
  size_t most_blocks = 0;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t>& table = tables_.at(rows[b]);
    const int64_t start = lengths_[rows[b]], end = start + counts[b];
    while (static_cast<int64_t>(table.size()) * kBlockTokens < end) {
      if (free_blocks_.empty())
        throw std::logic_error(cat("PagedKvCache: no free block for row ", rows[b], " at ", end, " tokens"));
      table.push_back(free_blocks_.back());
      free_blocks_.pop_back();
    }
    for (int64_t t = 0; t < width; ++t) {
      position[b][t] = start + t;
      if (t >= counts[b]) {
        all_real = false;
        continue;
      }
      slots.push_back(table[(start + t) / kBlockTokens] * kBlockTokens + (start + t) % kBlockTokens);
      real.push_back(b * width + t);
    }
    lengths_[rows[b]] = end;
    if (appends) {
      std::vector<int64_t> all(static_cast<size_t>(end));
      for (int64_t t = 0; t < end; ++t) all[t] = table[t / kBlockTokens] * kBlockTokens + t % kBlockTokens;
      step.row_slots.push_back(at::tensor(all, at::kLong).to(device_));
      step.starts.push_back(start);
    }
    step.longest = std::max(step.longest, end);
    most_blocks = std::max(most_blocks, table.size());
  }
  step.positions = positions.to(device_);
  step.write_slots = at::tensor(slots, at::kLong).to(device_);
  if (!all_real) step.real_tokens = at::tensor(real, at::kLong).to(device_);
  if (!step.prefill && !appends) {
    std::vector<int64_t> tables(batch * most_blocks, 0), lengths;
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<int64_t>& table = tables_[rows[b]];
      std::copy(table.begin(), table.end(), tables.begin() + b * static_cast<int64_t>(most_blocks));
      lengths.push_back(lengths_[rows[b]]);
    }
    step.tables = at::tensor(tables, at::kLong).view({batch, static_cast<int64_t>(most_blocks)}).to(device_);
    step.lengths = at::tensor(lengths, at::kLong).to(device_);
  }
  return step;
}

// Row by row (such steps are rare: one per environment reply): the row's keys and
// values gathered from the pool, each new token attending to every earlier token of
// its row and itself. Padding queries past a row's count are computed and unused.
at::Tensor PagedKvCache::attend_appended(const CacheStep& step, const at::Tensor& q, const at::Tensor& key_pool,
                                         const at::Tensor& value_pool, int64_t window) const {
  const int64_t kv_heads = key_pool.size(2), dim = key_pool.size(3), width = q.size(2);
  std::vector<at::Tensor> rows;
  for (size_t b = 0; b < step.row_slots.size(); ++b) {
    const at::Tensor& slots = step.row_slots[b];
    const int64_t length = slots.size(0);
    auto gather = [&](const at::Tensor& pool) {
      return pool.view({-1, kv_heads, dim}).index_select(0, slots).transpose(0, 1).unsqueeze(0);  // [1, kv, S, dim]
    };
    const at::Tensor query = at::arange(step.starts[b], step.starts[b] + width, slots.options()).view({width, 1});
    const at::Tensor key = at::arange(length, slots.options()).view({1, length});
    at::Tensor allowed = key <= query;
    if (window > 0) allowed = allowed & (query - key < window);
    rows.push_back(areal::attend(config_, q.narrow(0, static_cast<int64_t>(b), 1), gather(key_pool), gather(value_pool),
                                 allowed.view({1, 1, width, length}), /*causal=*/false));
  }
  return at::cat(rows);
}

namespace {

// tokens [n, kv_heads, dim] into the pool's slots. On the CPU one copy per token: at a
// decode step's few rows of a few hundred bytes index_copy_'s general loop cost 60 us a
// call, 24 calls a step.
void write_tokens(at::Tensor& pool, const at::Tensor& slots, const at::Tensor& tokens) {
  at::Tensor rows = pool.view({-1, tokens.size(1), tokens.size(2)});
  if (!pool.is_cpu() || tokens.scalar_type() != pool.scalar_type()) {
    rows.index_copy_(0, slots, tokens);
    return;
  }
  const at::Tensor source = tokens.contiguous(), where = slots.contiguous();
  const int64_t n = source.size(0), capacity = rows.size(0), bytes = source.stride(0) * source.element_size();
  const int64_t* slot = where.data_ptr<int64_t>();
  const char* from = static_cast<const char*>(source.data_ptr());
  char* to = static_cast<char*>(rows.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(slot[i] >= 0 && slot[i] < capacity, "PagedKvCache: slot ", slot[i], " outside the pool of ", capacity);
    std::memcpy(to + slot[i] * bytes, from + i * bytes, static_cast<size_t>(bytes));
  }
}

}  // namespace

at::Tensor PagedKvCache::attend(size_t layer, const CacheStep& step, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v) {
  at::Tensor& key_pool = keys_.at(layer);
  at::Tensor& value_pool = values_.at(layer);
  const int64_t kv_heads = key_pool.size(2), dim = key_pool.size(3);
  // [B, kv_heads, T, dim] -> one row per token, the real ones, into their slots.
  auto store = [&](at::Tensor& pool, const at::Tensor& x) {
    at::Tensor tokens = x.transpose(1, 2).reshape({-1, kv_heads, dim});
    if (step.real_tokens.defined()) tokens = tokens.index_select(0, step.real_tokens);
    write_tokens(pool, step.write_slots, tokens);
  };
  store(key_pool, k);
  store(value_pool, v);
  // A prefill's rows were empty: each query attends to its own row's tokens up to
  // itself, and a row's padding comes after its real tokens, so no real query sees it.
  const int64_t window = config_.layer_slides(static_cast<int64_t>(layer)) ? config_.sliding_window : 0;
  if (step.prefill) return areal::attend(config_, q, k, v, {}, /*causal=*/true, window);
  if (!step.row_slots.empty()) return attend_appended(step, q, key_pool, value_pool, window);
  const double scale = config_.attention_scale > 0 ? config_.attention_scale : 1.0 / std::sqrt(double(dim));
  return paged_decode_attention(q, key_pool, value_pool, step.tables, step.lengths, step.longest, scale,
                                config_.attn_logit_softcapping, window);
}

}  // namespace areal
