// Supervised fine-tuning on the sharded engine (`--job sft`): next-token loss on a JSONL
// dataset of texts with the byte-level tokenizer, AdamW with the configured schedule
// and clipping, a line of stats per step, a Hugging Face checkpoint at the end. Enough
// to exercise the engine end to end; the RL loop builds on the same pieces.
#pragma once

#include <string>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/sharded_model.h"

namespace areal {

struct SftSummary {
  int64_t steps = 0;
  double first_loss = 0;
  double last_loss = 0;
  std::string checkpoint;  // where the final weights were saved
};

// Collective. The loss of a step is the mean over every non-padding target token of
// the global batch (all ranks), whatever the world size.
SftSummary run_sft(const Config& cfg, const RankInfo& me, Communicator& comm, ShardedModel& model);

}  // namespace areal
