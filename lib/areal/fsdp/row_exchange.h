// Rows of a tensor to the ranks of a group and back, under autograd: what expert
// parallelism (a token's row to the rank of its expert) and context parallelism (a
// chunk of heads to the rank that attends over them) send.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "areal/dist/communicator.h"

namespace areal {

// Collective over `group`: `rows` [N, ...] holds send_rows[p] rows for rank p, back to
// back in rank order; returns the rows every rank sent this one, recv_rows[p] from rank p
// in rank order (what p sends here must be what this rank expects from p). The gradient of
// the result goes back the same way (the counts swapped).
at::Tensor exchange_rows(Communicator& group, const at::Tensor& rows, const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows);

}  // namespace areal
