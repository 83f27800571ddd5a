// Supervised fine-tuning on the sharded engine (`--job sft`): next-token loss on a JSONL
// dataset (texts, or prompt/answer pairs with the loss on the answer; text_dataset.h)
// with the model's tokenizer, micro-batches by token budget (micro_batches.h), AdamW
// with the configured schedule and clipping, a line of stats per step, a Hugging Face
// checkpoint at the end.
#pragma once

#include <cmath>

#include <string>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/policy.h"
#include "areal/sft/sft_inputs.h"

namespace areal {

struct SftSummary {
  int64_t steps = 0;
  double first_loss = 0;
  double last_loss = 0;
  double eval_loss_before = NAN;  // on valid_dataset, when given
  double eval_loss_after = NAN;
  std::string checkpoint;  // where the final weights were saved
};

// Collective. The loss of a step is the mean over every non-padding target token of
// the global batch (all ranks), whatever the world size. With valid_dataset the same
// loss over all of its sequences (no update) is evaluated before the first step, on
// evaluator.freq_*, and after the last. `inputs` from prepare_job.
SftSummary run_sft(const Config& cfg, const SftInputs& inputs, const RankInfo& me, Communicator& comm,
                   Policy& policy);

}  // namespace areal
