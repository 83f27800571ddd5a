// Weight sync of asynchronous RL under mpirun -np 2..4: the first ranks are a
// generation replica (t = 1, or t = 2 at -np 4), the others train. After each sync
// every generation rank's slices must equal, bit for bit, the slices the colocated
// path takes from the same shards (an independent gather on the trainers, sent beside
// the sync for the comparison): for version 0, and again after the shards changed.
#include <ATen/ATen.h>
#include "catch_with_torch.h"

#include "areal/dist/mailbox.h"
#include "areal/fsdp/staged_init.h"
#include "areal/model/hf_weights.h"
#include "areal/rollout/weight_sync.h"
#include "mpi_fixture.h"
#include "test_paths.h"

using namespace areal;
using areal::testing::g_comm;
using areal::testing::g_me;

namespace {

constexpr int kTagReference = 99;

// The reference slices go out in name order; the generation rank reads them in the same order.
void send_reference(Mailbox& mail, int dest, const RolloutModel& reference) {
  for (const auto& [name, t] : reference.named_slices()) {
    at::Tensor c = t.contiguous();
    mail.send_raw(dest, kTagReference, c.data_ptr(), static_cast<int64_t>(c.nbytes()));
  }
}

void check_against_reference(Mailbox& mail, int source, const RolloutModel& model) {
  for (const auto& [name, t] : model.named_slices()) {
    at::Tensor want = at::empty_like(t, at::MemoryFormat::Contiguous);
    mail.receive_raw(source, kTagReference, want.data_ptr(), static_cast<int64_t>(want.nbytes()));
    INFO(name);
    CHECK(at::equal(t, want));
  }
}

}  // namespace

TEST_CASE("weight sync: generation slices equal the shards' bit for bit after every version", "[async]") {
  REQUIRE(g_me.world_size >= 2);
  const int generators = g_me.world_size == 4 ? 2 : 1, trainers = g_me.world_size - generators;
  const bool trains = g_me.rank >= generators;
  for (const char* name : {"qwen2_tied", "qwen2_untied", "llama_mha_bias"}) {
    for (const char* dtype : {"float32", "bfloat16"}) {
      INFO(name << " " << dtype);
      Config cfg;
      cfg.model_path = source_path("tests/fixtures/models/") + name;
      cfg.fsdp.memory_efficient_load = true;
      cfg.device = "cpu";
      cfg.actor.dtype = dtype;
      const at::ScalarType compute = dtype_from_name(dtype);
      std::unique_ptr<Communicator> side = g_comm->split(trains ? 1 : 0, g_me.rank);
      Mailbox mail;
      if (trains) {
        RankInfo me = g_me;
        me.rank -= generators;
        me.world_size = trainers;
        InitResult init = staged_init(cfg, me, *side);
        Policy policy(cfg, *init.model, *side);
        std::vector<int> served;
        for (int g = 0; g < generators; ++g)
          if (g % trainers == me.rank) served.push_back(g);
        // The reference replica: as many trainers as the generation replica has ranks.
        std::unique_ptr<Communicator> reference_group = generators > 1 ? side->split(0, me.rank) : nullptr;
        for (int64_t version : {0, 1}) {
          send_weights(policy, mail, served, version, compute);
          RolloutModel reference(policy, reference_group.get(), compute, at::kCPU);
          for (int g : served) send_reference(mail, g, reference);
          at::NoGradGuard no_grad;  // an "optimizer step": every shard moves
          for (at::Tensor shard : policy.trainable()) shard.mul_(1.5).add_(0.25);
        }
      } else {
        const ModelConfig config = ModelConfig::from_file(cfg.model_path + "/config.json");
        std::unique_ptr<Communicator> tp = generators > 1 ? side->split(0, g_me.rank) : nullptr;
        const int source = generators + g_me.rank % trainers;
        int64_t version = -1;
        RolloutModel model = receive_first_weights(mail, source, config, tp.get(), compute, at::kCPU, version);
        CHECK(version == 0);
        check_against_reference(mail, source, model);
        const at::Tensor before = model.named_slices().at("model.norm.weight").clone();
        CHECK(receive_weights(mail, source, model) == 1);
        check_against_reference(mail, source, model);
        CHECK_FALSE(at::equal(before, model.named_slices().at("model.norm.weight")));  // the new version is new
        if (tp) CHECK(model.weight_bytes() < RolloutModel(*load_causal_lm(cfg.model_path, compute)).weight_bytes());
      }
      g_comm->barrier();
    }
  }
}
