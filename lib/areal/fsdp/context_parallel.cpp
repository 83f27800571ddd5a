#include "areal/fsdp/context_parallel.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "areal/fsdp/row_exchange.h"
#include "areal/util/strings.h"

namespace areal {

namespace {

// [B, heads, T / C, D] (this rank's tokens, every head) -> [B, heads / C, T, D] (every
// token, this rank's heads): head group p goes to rank p, and the chunks that come back
// are the sequence's in rank order.
at::Tensor heads_for_tokens(Communicator& group, const at::Tensor& x) {
  const int64_t c = group.world_size(), b = x.size(0), h = x.size(1), t = x.size(2), d = x.size(3);
  const std::vector<int64_t> one(static_cast<size_t>(c), 1);
  const at::Tensor by_rank = x.reshape({b, c, h / c, t, d}).permute({1, 0, 2, 3, 4});  // [C, B, h/C, t, D]
  const at::Tensor chunks = exchange_rows(group, by_rank.contiguous(), one, one);        // [C (chunk), B, h/C, t, D]
  return chunks.permute({1, 2, 0, 3, 4}).reshape({b, h / c, c * t, d});
}

// The inverse: [B, heads / C, T, D] -> [B, heads, T / C, D].
at::Tensor tokens_for_heads(Communicator& group, const at::Tensor& x) {
  const int64_t c = group.world_size(), b = x.size(0), h = x.size(1), t = x.size(2) / c, d = x.size(3);
  const std::vector<int64_t> one(static_cast<size_t>(c), 1);
  const at::Tensor by_rank = x.reshape({b, h, c, t, d}).permute({2, 0, 1, 3, 4});  // [C (chunk), B, h, t, D]
  const at::Tensor heads = exchange_rows(group, by_rank.contiguous(), one, one);     // [C (head group), B, h, t, D]
  return heads.permute({1, 0, 2, 3, 4}).reshape({b, c * h, t, d});
}

}  // namespace

ContextParallelism::ContextParallelism(Communicator& comm, const ModelConfig& config, int degree, int stride) {
  const int world = comm.world_size(), rank = comm.rank();
  const int64_t kv = config.num_key_value_heads;
  if (degree < 1 || stride < 1 || world % (degree * stride) != 0 || config.num_attention_heads % degree != 0 ||
      (kv % degree != 0 && degree % kv != 0))
    throw std::invalid_argument(cat("ContextParallelism: groups of ", degree, " ranks over ", world, " ranks, ",
                                    config.num_attention_heads, " attention heads and ", kv,
                                    " key/value heads (the group size must divide the ranks and the heads, and divide "
                                    "or be a multiple of the key/value heads)"));
  if (config.num_experts > 0)
    throw std::invalid_argument("ContextParallelism: a mixture of experts is not built with context parallelism");
  // Rank = (group index x degree + chunk) x stride + place in a tensor-parallel group.
  const int chunk = (rank / stride) % degree, place = rank % stride, index = rank / (degree * stride);
  group_ = comm.split(index * stride + place, chunk);
  data_group_ = comm.split(chunk * stride + place, index);
  Communicator* group = group_.get();
  layer_parallel_.ranks = degree;
  layer_parallel_.rank = chunk;
  layer_parallel_.to_heads = [group](const at::Tensor& x) { return heads_for_tokens(*group, x); };
  layer_parallel_.to_tokens = [group](const at::Tensor& x) { return tokens_for_heads(*group, x); };
}

ContextParallelism::~ContextParallelism() = default;

}  // namespace areal
