#include "areal/rollout/weight_sync.h"

#include <ATen/ATen.h>

#include "areal/util/byte_stream.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// A version's first message: its number and how many units follow.
std::vector<char> header(int64_t version, int64_t units) {
  ByteWriter w;
  w.put(version);
  w.put(units);
  return w.take();
}

// A unit: one message with every tensor's name, dtype and shape, then each tensor's
// bytes straight from its memory (no copy on the host).
void send_unit(Mailbox& mail, int dest, const std::map<std::string, at::Tensor>& unit) {
  ByteWriter w;
  w.put<int64_t>(static_cast<int64_t>(unit.size()));
  for (const auto& [name, t] : unit) {
    w.put_string(name);
    w.put<int32_t>(static_cast<int32_t>(t.scalar_type()));
    w.put_vector(t.sizes().vec());
  }
  mail.send(dest, kTagWeights, w.take());
  for (const auto& [name, t] : unit) mail.send_raw(dest, kTagWeights, t.data_ptr(), static_cast<int64_t>(t.nbytes()));
}

std::map<std::string, at::Tensor> receive_unit(Mailbox& mail, int source) {
  Message meta = mail.receive(kTagWeights, source, "a unit of new weights");
  ByteReader r(meta.bytes);
  std::map<std::string, at::Tensor> unit;
  std::vector<at::Tensor> order;  // the bytes follow in the meta message's order
  const int64_t count = r.get<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    std::string name = r.get_string();
    const auto dtype = static_cast<at::ScalarType>(r.get<int32_t>());
    at::Tensor t = at::empty(r.get_vector<int64_t>(), at::TensorOptions().dtype(dtype));
    order.push_back(t);
    unit.emplace(std::move(name), t);
  }
  for (at::Tensor& t : order) mail.receive_raw(source, kTagWeights, t.data_ptr(), static_cast<int64_t>(t.nbytes()));
  return unit;
}

// Reads a version's header; throws StopRequested on the stop notice.
std::pair<int64_t, int64_t> receive_header(Mailbox& mail, int source) {
  Message m = mail.receive(kTagWeights, source, "new weights from the trainers");
  ByteReader r(m.bytes);
  const int64_t version = r.get<int64_t>(), units = r.get<int64_t>();
  if (version < 0) throw StopRequested("the trainers stopped (a stop signal); the generation ranks stop with them");
  mail.send(source, kTagWeightsReady, {});
  return {version, units};
}

}  // namespace

void send_weights(Policy& policy, Mailbox& mail, const std::vector<int>& to, int64_t version,
                  at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  const int64_t units = static_cast<int64_t>(policy.unit_count());
  for (int dest : to) mail.send(dest, kTagWeights, header(version, units));
  for (int dest : to) mail.receive(kTagWeightsReady, dest, cat("generation rank ", dest, " to take the weights"));
  policy.comm().barrier_unwatched();
  for (size_t u = 0; u < policy.unit_count(); ++u) {
    std::map<std::string, at::Tensor> unit = policy.unit_weights(u, dtype);  // collective: every trainer
    if (to.empty()) continue;
    for (auto& [name, t] : unit) t = t.cpu().contiguous();
    for (int dest : to) send_unit(mail, dest, unit);
  }
}

void send_stop(Mailbox& mail, const std::vector<int>& to) {
  for (int dest : to) mail.send(dest, kTagWeights, header(-1, 0));
}

bool weights_waiting(Mailbox& mail, int source) { return mail.arrived(kTagWeights, source); }

int64_t receive_weights(Mailbox& mail, int source, RolloutModel& model) {
  auto [version, units] = receive_header(mail, source);
  model.replace(static_cast<size_t>(units), [&](size_t) { return receive_unit(mail, source); });
  return version;
}

RolloutModel receive_first_weights(Mailbox& mail, int source, const ModelConfig& config, Communicator* group,
                                   at::ScalarType dtype, const at::Device& device, int64_t& version,
                                   bool whole_experts) {
  auto [v, units] = receive_header(mail, source);
  version = v;
  return RolloutModel(config, static_cast<size_t>(units), [&](size_t) { return receive_unit(mail, source); }, group,
                      dtype, device, whole_experts);
}

}  // namespace areal
