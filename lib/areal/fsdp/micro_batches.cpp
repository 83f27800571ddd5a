#include "areal/fsdp/micro_batches.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace areal {

bool shares_prompts(const PaddedSequences& set, const ContextChunk& context) {
  return !set.prompt_lengths.empty() && context.ranks <= 1 && !set.experts.defined();
}

namespace {

// Whether rows a and b of `set` start with the same prompt and each has tokens after it.
bool share_prompt(const PaddedSequences& set, int64_t a, int64_t b) {
  const int64_t p = set.prompt_lengths.at(a);
  if (p < 1 || set.prompt_lengths.at(b) != p || set.lengths.at(a) <= p || set.lengths.at(b) <= p) return false;
  return at::equal(set.ids[a].narrow(0, 0, p), set.ids[b].narrow(0, 0, p));
}

// Rows [begin, end) as what first-fit decreasing places: one row each, or with shared
// prompts each run of rows with one prompt, cut where its tokens (the prompt once) would
// pass max_tokens. `tokens`: each unit's.
std::vector<std::vector<int64_t>> packing_units(const PaddedSequences& set, int64_t begin, int64_t end,
                                                int64_t max_tokens, bool share, std::vector<int64_t>& tokens) {
  std::vector<std::vector<int64_t>> units;
  for (int64_t r = begin; r < end; ++r) {
    if (share && !units.empty() && share_prompt(set, units.back().front(), r) &&
        tokens.back() + set.lengths.at(r) - set.prompt_lengths.at(r) <= max_tokens) {
      units.back().push_back(r);
      tokens.back() += set.lengths.at(r) - set.prompt_lengths.at(r);
      continue;
    }
    units.push_back({r});
    tokens.push_back(set.lengths.at(r));
  }
  return units;
}

}  // namespace

MicroBatch::MicroBatch(const PaddedSequences& set, std::vector<int64_t> rows, bool packed, const at::Device& device,
                       ContextChunk context)
    : rows_(std::move(rows)), packed_(packed), device_(device), context_(context) {
  if (context_.ranks > 1 && set.experts.defined())
    throw std::invalid_argument("MicroBatch: context parallelism takes no recorded experts");
  const int64_t length = set.ids.size(1);
  targets_ = set.ids.narrow(1, 1, length - 1);
  for (int64_t r : rows_) lengths_.push_back(set.lengths.at(r));
  if (packed_) {
    std::vector<at::Tensor> pieces, experts;
    if (shares_prompts(set, context_)) {
      pack_shared_prompts(set, pieces);
    } else {
      for (size_t i = 0; i < rows_.size(); ++i) {
        pieces.push_back(set.ids[rows_[i]].narrow(0, 0, lengths_[i]));
        if (set.experts.defined()) experts.push_back(set.experts[rows_[i]].narrow(0, 0, lengths_[i]));
      }
    }
    // An empty micro-batch (a rank short of sequences) is one padding token with no loss.
    at::Tensor row = pieces.empty() ? at::zeros({1}, at::kLong) : at::cat(pieces);
    if (set.experts.defined())
      experts_ = (pieces.empty() ? at::full({1, set.experts.size(2)}, -1, at::kShort) : at::cat(experts)).unsqueeze(0);
    if (pieces.empty()) lengths_ = {1};
    width_ = source_.defined() ? source_.numel() : row.numel();
    if (context_.ranks > 1) {  // padding to a multiple of the group: a sequence of its own, with no loss
      const int64_t padding = (row.numel() + context_.ranks - 1) / context_.ranks * context_.ranks - row.numel();
      if (padding > 0) {
        row = at::constant_pad_nd(row, {0, padding}, 0);
        lengths_.push_back(padding);
      }
      width_ = row.numel() / context_.ranks;
      first_ = context_.rank * width_;
    }
    if (!source_.defined()) segments_ = lengths_;
    whole_ids_ = row.view({1, -1}).to(device_);
    ids_ = context_.ranks > 1 ? whole_ids_.narrow(1, first_, width_).contiguous() : whole_ids_;
  } else {
    const int64_t longest = std::max<int64_t>(2, *std::max_element(lengths_.begin(), lengths_.end()));
    at::Tensor ids = set.ids.index_select(0, at::tensor(rows_, at::kLong)).narrow(1, 0, std::min(longest, set.ids.size(1)));
    if (set.experts.defined()) experts_ = set.experts.index_select(0, at::tensor(rows_, at::kLong)).narrow(1, 0, longest);
    width_ = longest - 1;
    if (context_.ranks > 1) {  // padded to a multiple of the group; this rank's chunk of each row
      const int64_t padded = (longest + context_.ranks - 1) / context_.ranks * context_.ranks;
      ids = at::constant_pad_nd(ids, {0, padded - ids.size(1)}, 0);
      width_ = padded / context_.ranks;
      first_ = context_.rank * width_;
    }
    whole_ids_ = ids.to(device_);
    ids_ = context_.ranks > 1 ? whole_ids_.narrow(1, first_, width_).contiguous() : whole_ids_;
  }
}

void MicroBatch::pack_shared_prompts(const PaddedSequences& set, std::vector<at::Tensor>& pieces) {
  std::vector<int64_t> source;  // each laid-out position's forward position
  int64_t forward_length = 0;
  bool shared = false;
  for (size_t i = 0; i < rows_.size();) {
    size_t end = i + 1;  // rows [i, end) share row i's prompt
    while (end < rows_.size() && share_prompt(set, rows_[i], rows_[end])) ++end;
    if (end == i + 1) {  // a sequence of its own
      pieces.push_back(set.ids[rows_[i]].narrow(0, 0, lengths_[i]));
      segments_.push_back(lengths_[i]);
      prefixes_.push_back(-1);
      for (int64_t t = 0; t < lengths_[i]; ++t) source.push_back(forward_length + t);
      forward_length += lengths_[i];
      i = end;
      continue;
    }
    shared = true;
    const int64_t p = set.prompt_lengths.at(rows_[i]), prompt_first = forward_length;
    const int64_t prompt_segment = static_cast<int64_t>(segments_.size());
    pieces.push_back(set.ids[rows_[i]].narrow(0, 0, p));
    segments_.push_back(p);
    prefixes_.push_back(-1);
    forward_length += p;
    for (; i < end; ++i) {  // each answer after the one prompt
      const int64_t answer = lengths_[i] - p;
      pieces.push_back(set.ids[rows_[i]].narrow(0, p, answer));
      segments_.push_back(answer);
      prefixes_.push_back(prompt_segment);
      for (int64_t t = 0; t < lengths_[i]; ++t) source.push_back(t < p ? prompt_first + t : forward_length + t - p);
      forward_length += answer;
    }
  }
  if (shared) {
    source_ = at::tensor(source, at::kLong).to(device_);
  } else {  // nothing shared: the plain packed row
    segments_.clear();
    prefixes_.clear();
  }
}

at::Tensor MicroBatch::run(Policy& policy, PolicyWeights weights, double loss_share, const at::Tensor& head_rows) const {
  if (packed_) {
    return policy.forward(ids_,
                          packed_attention_inputs(policy.config(), segments_, device_, policy.compute_dtype(), prefixes_),
                          weights, loss_share, head_rows, experts_);
  }
  at::Tensor mask = at::arange(whole_ids_.size(1), at::kLong).view({1, -1}) < at::tensor(lengths_, at::kLong).view({-1, 1});
  mask = mask.to(at::kLong).to(device_);
  if (context_.ranks > 1)  // this rank's chunk, attending over the whole rows
    return policy.forward(ids_, attention_inputs(policy.config(), whole_ids_, mask, nullptr, policy.compute_dtype()),
                          weights, loss_share, head_rows, experts_);
  return policy.forward(ids_, mask, weights, loss_share, head_rows, experts_);
}

at::Tensor MicroBatch::forward(Policy& policy, PolicyWeights weights, double loss_share) const {
  at::Tensor logits = run(policy, weights, loss_share, {});
  if (source_.defined()) return logits.index_select(1, source_);  // a shared prompt's logits for each of its rows
  return packed_ ? logits : logits.narrow(1, 0, width_);
}

at::Tensor MicroBatch::forward_at(Policy& policy, const at::Tensor& mask, PolicyWeights weights,
                                  double loss_share) const {
  // Laid-out position (r, w) is the forward's position r * T + w of its [R, T] input.
  const at::Tensor at = mask.nonzero().to(device_);
  if (source_.defined())  // one packed row: column w's forward position
    return run(policy, weights, loss_share, source_.index_select(0, at.select(1, 1)));
  return run(policy, weights, loss_share, at.select(1, 0) * ids_.size(1) + at.select(1, 1));
}

at::Tensor MicroBatch::spread(const at::Tensor& mask, const at::Tensor& values) {
  return at::zeros(mask.sizes(), values.options()).masked_scatter(mask, values);
}

at::Tensor MicroBatch::lay_out(const at::Tensor& target_values) const {
  if (!packed_) {  // columns [first_, first_ + width_) of the rows (zeros past their end)
    at::Tensor rows = target_values.index_select(0, at::tensor(rows_, at::kLong));
    if (rows.size(1) < first_ + width_) rows = at::constant_pad_nd(rows, {0, first_ + width_ - rows.size(1)}, 0);
    return rows.narrow(1, first_, width_).to(device_);
  }
  at::Tensor out = at::zeros({1, source_.defined() ? source_.numel() : whole_ids_.size(1)}, target_values.options());
  int64_t offset = 0;
  for (size_t i = 0; i < rows_.size(); ++i) {
    // Positions [offset, offset + length - 1) predict the sequence's own next tokens;
    // its last position predicts nothing.
    out[0].narrow(0, offset, lengths_[i] - 1).copy_(target_values[rows_[i]].narrow(0, 0, lengths_[i] - 1));
    offset += lengths_[i];
  }
  return out.narrow(1, first_, width_).to(device_);
}

void MicroBatch::put_back(const at::Tensor& laid_out, at::Tensor& out) const {
  int64_t offset = 0;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (packed_) {  // the sequence's positions [offset, offset + length - 1) inside this rank's columns
      const int64_t from = std::max(offset, first_), to = std::min(offset + lengths_[i] - 1, first_ + width_);
      if (to > from) out[rows_[i]].narrow(0, from - offset, to - from).copy_(laid_out[0].narrow(0, from - first_, to - from));
      offset += lengths_[i];
    } else {
      const int64_t n = std::clamp<int64_t>(out.size(1) - first_, 0, width_);
      if (n > 0) out[rows_[i]].narrow(0, first_, n).copy_(laid_out[i].narrow(0, 0, n));
    }
  }
}

std::vector<std::vector<int64_t>> first_fit_decreasing(const std::vector<int64_t>& lengths, int64_t max_tokens) {
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> used;
  for (int64_t i : order) {
    size_t g = 0;
    while (g < groups.size() && used[g] + lengths[i] > max_tokens) ++g;
    if (g == groups.size()) {
      groups.emplace_back();
      used.push_back(0);
    }
    groups[g].push_back(i);
    used[g] += lengths[i];
  }
  for (auto& group : groups) std::sort(group.begin(), group.end());
  return groups;
}

std::vector<MicroBatch> micro_batches(const PaddedSequences& set, int64_t begin, int64_t end, int64_t max_tokens,
                                      Communicator& comm, const at::Device& device, ContextChunk context) {
  if (max_tokens <= 0) {
    std::vector<int64_t> rows(end - begin);
    std::iota(rows.begin(), rows.end(), begin);
    return {MicroBatch(set, rows, /*packed=*/false, device, context)};
  }

  std::vector<int64_t> tokens;
  const std::vector<std::vector<int64_t>> units =
      packing_units(set, begin, end, max_tokens, shares_prompts(set, context), tokens);
  std::vector<MicroBatch> out;
  for (const auto& group : first_fit_decreasing(tokens, max_tokens)) {
    std::vector<int64_t> members;  // ascending: a unit's rows stay together
    for (int64_t i : group) members.insert(members.end(), units[i].begin(), units[i].end());
    out.emplace_back(set, std::move(members), /*packed=*/true, device, context);
  }
  at::Tensor count = at::tensor({static_cast<double>(out.size())}, at::kDouble);
  comm.all_reduce(count, ReduceOp::Max);
  while (static_cast<double>(out.size()) < count.item<double>())
    out.emplace_back(set, std::vector<int64_t>{}, true, device, context);
  return out;
}

}  // namespace areal
