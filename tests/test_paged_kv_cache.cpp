// The paged KV cache: decoding attention read from scattered blocks equals plain
// attention over each row's keys laid out contiguously, and rows leaving or joining
// move no other row's cache.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include "catch_with_torch.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "areal/model/hf_weights.h"
#include "areal/rollout/paged_attention.h"
#include "areal/rollout/paged_kv_cache.h"
#include "test_paths.h"

using namespace areal;

namespace {

// Softmax(q k^T / sqrt(d)) v for one row, written out by hand: query head h reads
// key/value head h / group.
at::Tensor reference_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values) {
  // q [heads, d], keys/values [length, kv_heads, d] (float64)
  const int64_t heads = q.size(0), kv_heads = keys.size(1), group = heads / kv_heads;
  at::Tensor out = at::empty_like(q);
  for (int64_t h = 0; h < heads; ++h) {
    at::Tensor k = keys.select(1, h / group), v = values.select(1, h / group);
    at::Tensor weights = (k.matmul(q[h]) / std::sqrt(static_cast<double>(q.size(1)))).softmax(0);
    out[h] = weights.matmul(v);
  }
  return out;
}

}  // namespace

TEST_CASE("paged attention: decoding from scattered blocks equals attention over each row's own keys",
          "[rl][generation]") {
  // 5 rows of 1..70 tokens, 6 query heads on 2 key/value heads (3 per group), blocks of
  // 4 tokens handed out in a shuffled order; tolerances: float32 1e-5, bfloat16 2e-2
  // (its inputs are rounded to 8 bits of mantissa, the sums are float32). Head sizes: the
  // kernel's whole-register loops (16, 64) and its element loops (8).
  for (const int64_t dim : {16, 64, 8}) {
  INFO("head_dim " << dim);
  const int64_t rows = 5, heads = 6, kv_heads = 2, block = 4, pool_blocks = 64;
  const std::vector<int64_t> lengths = {1, 17, 70, 33, 4};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor key_pool = at::randn({pool_blocks, block, kv_heads, dim}, gen, at::kDouble);
  const at::Tensor value_pool = at::randn({pool_blocks, block, kv_heads, dim}, gen, at::kDouble);
  const at::Tensor q = at::randn({rows, heads, 1, dim}, gen, at::kDouble);
  std::vector<int64_t> order(pool_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  const int64_t most_blocks = (70 + block - 1) / block;
  at::Tensor tables = at::zeros({rows, most_blocks}, at::kLong);
  size_t next = 0;
  std::vector<at::Tensor> want;
  for (int64_t b = 0; b < rows; ++b) {
    std::vector<at::Tensor> k, v;
    for (int64_t j = 0; j * block < lengths[b]; ++j) {
      tables[b][j] = order[next++];
      const int64_t n = std::min(block, lengths[b] - j * block);
      k.push_back(key_pool[tables[b][j].item<int64_t>()].narrow(0, 0, n));
      v.push_back(value_pool[tables[b][j].item<int64_t>()].narrow(0, 0, n));
    }
    want.push_back(reference_attention(q[b].select(1, 0), at::cat(k), at::cat(v)));
  }
  const at::Tensor length_tensor = at::tensor(lengths, at::kLong);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    INFO("dtype " << c10::toString(dtype));
    const double tolerance = dtype == at::kFloat ? 1e-5 : 2e-2;
    const at::Tensor kernel = paged_decode_attention(q.to(dtype), key_pool.to(dtype), value_pool.to(dtype), tables,
                                                     length_tensor, 70);
    const at::Tensor gathered = gathered_decode_attention(q.to(dtype), key_pool.to(dtype), value_pool.to(dtype),
                                                          tables, length_tensor, 70);
    REQUIRE(kernel.sizes() == q.sizes());
    for (int64_t b = 0; b < rows; ++b) {
      INFO("row " << b << " of " << lengths[b] << " tokens");
      CHECK((kernel[b].select(1, 0).to(at::kDouble) - want[b]).abs().max().item<double>() < tolerance);
      CHECK((gathered[b].select(1, 0).to(at::kDouble) - want[b]).abs().max().item<double>() < tolerance);
    }
  }
  }
}

TEST_CASE("paged KV cache: rows take blocks as they grow and give them back when they leave", "[rl][generation]") {
  // The test model (2 layers, 2 key/value heads); 3 rows of up to 40 tokens = 3 x 3
  // blocks of 16.
  auto model = load_causal_lm(source_path("tests/fixtures/models/qwen2_untied"), at::kFloat);
  const ModelConfig& c = model->config();
  RolloutModel whole(*model);
  PagedKvCache cache(whole, 3, 40);
  CHECK(cache.bytes() == c.num_hidden_layers * 2 * 9 * PagedKvCache::kBlockTokens * c.num_key_value_heads *
                             c.head_dim * static_cast<int64_t>(sizeof(float)));
  cache.add_rows(3);
  // Prefill rows of 20, 5 and 33 tokens: 2 + 1 + 3 = 6 blocks taken.
  CacheStep prefill = cache.begin({0, 1, 2}, {20, 5, 33}, 33);
  CHECK(prefill.prefill);
  CHECK(prefill.write_slots.numel() == 58);
  CHECK(prefill.real_tokens.numel() == 58);
  CHECK(prefill.positions[2][32].item<int64_t>() == 32);
  // One decoding step: row 1 (5 -> 6 tokens) stays in its block, row 0 (20 -> 21) too.
  CacheStep decode = cache.begin({0, 1, 2}, {1, 1, 1}, 1);
  CHECK_FALSE(decode.prefill);
  CHECK(decode.lengths[0].item<int64_t>() == 21);
  CHECK(decode.lengths[2].item<int64_t>() == 34);
  CHECK(decode.longest == 34);
  CHECK(decode.positions[1][0].item<int64_t>() == 5);
  // Row 1 leaves: rows 0 and 2 keep their block tables (now rows 0 and 1).
  const at::Tensor table_of_2 = decode.tables[2].narrow(0, 0, 3).clone();
  cache.keep_rows({0, 2});
  CHECK(cache.rows() == 2);
  CHECK(cache.length(1) == 34);
  CacheStep after = cache.begin({0, 1}, {1, 1}, 1);
  CHECK(at::equal(after.tables[1].narrow(0, 0, 3), table_of_2));
  // Two new rows of 40 tokens need 3 blocks each: 9 - 6 + 1 (row 1's) = 4 free: the
  // second does not fit and is refused rather than overwriting another row.
  cache.add_rows(1);
  cache.begin({2}, {40}, 40);
  cache.add_rows(1);
  CHECK_THROWS_WITH(cache.begin({3}, {40}, 40), Catch::Matchers::Contains("no free block"));
  // Several tokens appended to a row that holds some (an episode's environment message):
  // the step lists the slots of all the row's tokens, its old ones first.
  const int64_t before = cache.length(0);
  const at::Tensor old_slots = after.tables[0].narrow(0, 0, 3);
  CacheStep appended = cache.begin({0}, {3}, 3);
  REQUIRE(appended.row_slots.size() == 1);
  CHECK(appended.starts == std::vector<int64_t>{before});
  CHECK(cache.length(0) == before + 3);
  REQUIRE(appended.row_slots[0].size(0) == before + 3);
  CHECK(appended.row_slots[0][17].item<int64_t>() == old_slots[1].item<int64_t>() * PagedKvCache::kBlockTokens + 1);
}
