// What an SFT job reads besides the model: tokenizer, sequences and the schedule.
// job/job_inputs.h loads and checks them before the staged init.
#pragma once

#include <memory>

#include "areal/data/epoch_plan.h"
#include "areal/data/text_dataset.h"
#include "areal/text/tokenizer.h"

namespace areal {

struct SftInputs {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TextDataset> train;
  std::unique_ptr<TextDataset> valid;  // valid_dataset.path, when given: the held-out loss
  TrainingSchedule schedule;
};

}  // namespace areal
