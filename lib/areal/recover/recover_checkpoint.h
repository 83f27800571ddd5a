// Recover checkpoints: what a training run needs to continue exactly where it stopped,
// in one directory (<run dir>/recover):
//
//   recover_info.json                   the position (steps done), the loop's figures,
//                                       the trainable tensors and the world size
//   rank-00000-of-00002.safetensors     rank 0's slice of every trainable tensor, and
//   rank-00001-of-00002.safetensors     of its AdamW moments (exp_avg, exp_avg_sq), ...
//
// Each file holds its rank's part of each trainable unit's flat buffer without the
// padding, so a run saved at N ranks resumes at any other N: each rank reads the
// element ranges it owns now, from whichever files hold them.
//
// What needs no file: the data order is a function of (seed, epoch) (data/epoch_plan.h)
// and every answer's sampler one of (seed, step, prompt, sample) (rollout/generation.h), so
// the steps done fix all random state; the learning rate is a function of the step;
// the frozen base weights (LoRA) and the KL reference copy are the init's, rebuilt by
// the init of the resumed run exactly as the first time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "areal/dist/communicator.h"
#include "areal/fsdp/sharded_model.h"
#include "areal/optim/adamw.h"

namespace areal {

struct RecoverPoint {
  std::string job;                        // "sft" or "rl"
  int64_t steps_done = 0;                 // the run continues with step steps_done + 1
  int64_t optimizer_steps = 0;            // AdamW's step count (bias correction)
  bool has_optimizer = false;             // the moments are in the files
  int world_size = 0;                     // of the run that wrote it
  std::map<std::string, double> figures;  // the loop's own values (first loss, eval before, ...)

  struct Tensor {  // a trainable unit as saved (filled by read_recover_point)
    std::string name;
    int64_t numel = 0, shard_numel = 0;
  };
  std::vector<Tensor> tensors;
};

// Collective. Writes `dir` so that a crash at any instant leaves there either the
// previous complete recover checkpoint or the new one (io/atomic_dir.h): every rank
// writes its file into rank 0's temporary directory, then rank 0 swaps it in. With
// `optimizer` null the moments are left out (recover.no_save_optim).
void write_recover_checkpoint(const std::string& dir, const RecoverPoint& point, const ShardedModel& model,
                              const ShardedAdamW* optimizer, Communicator& comm);

// The recover_info.json of `dir`, or nullopt when `dir` holds none. A damaged one is a
// CheckpointError naming the file.
std::optional<RecoverPoint> read_recover_point(const std::string& dir);

// This rank's shards (and with `optimizer`, its moments and step count) from `dir`,
// re-sharded from point.world_size to the model's. Every trainable tensor must be there
// with the size of the model's; anything else is a CheckpointError naming the tensor
// and the file. Not collective: each rank reads its own ranges.
void load_recover_checkpoint(const std::string& dir, const RecoverPoint& point, ShardedModel& model,
                             ShardedAdamW* optimizer);

}  // namespace areal
