#include "areal/fsdp/row_exchange.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace areal {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t sum(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

// The all-to-all on whole rows, without a graph.
at::Tensor send_rows_once(Communicator& group, const at::Tensor& rows, const std::vector<int64_t>& send_rows,
                          const std::vector<int64_t>& recv_rows) {
  int64_t width = 1;  // elements per row (a row may be more than one dimension)
  for (int64_t d = 1; d < rows.dim(); ++d) width *= rows.size(d);
  std::vector<int64_t> sent(send_rows.size()), received(recv_rows.size());
  for (size_t p = 0; p < send_rows.size(); ++p) sent[p] = send_rows[p] * width;
  for (size_t p = 0; p < recv_rows.size(); ++p) received[p] = recv_rows[p] * width;
  std::vector<int64_t> shape = rows.sizes().vec();
  shape[0] = sum(recv_rows);
  at::Tensor out = at::empty(shape, rows.options());
  group.all_to_all(rows.contiguous(), sent, out, received);
  return out;
}

// The gradient of the received rows goes back the way they came: the same all-to-all
// with the counts swapped.
struct RowExchange : public torch::autograd::Function<RowExchange> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, Communicator* group,
                            const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    ctx->saved_data["send_rows"] = send_rows;
    ctx->saved_data["recv_rows"] = recv_rows;
    return send_rows_once(*group, rows, send_rows, recv_rows);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* group = reinterpret_cast<Communicator*>(ctx->saved_data.at("group").toInt());
    const std::vector<int64_t> send_rows = ctx->saved_data.at("send_rows").toIntVector();
    const std::vector<int64_t> recv_rows = ctx->saved_data.at("recv_rows").toIntVector();
    return {send_rows_once(*group, grads[0], recv_rows, send_rows), {}, {}, {}};
  }
};

}  // namespace

at::Tensor exchange_rows(Communicator& group, const at::Tensor& rows, const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows) {
  return RowExchange::apply(rows, &group, send_rows, recv_rows);
}

}  // namespace areal
