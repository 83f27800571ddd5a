// Point-to-point messages between ranks, beside the collectives: what asynchronous RL
// needs (finished groups from the generation ranks to the trainers, new weights from
// the trainers to the generation ranks, held-out scores back), where the two sides run
// different code and meet only when one of them has something to hand over.
//
// The mailbox has its own duplicate of MPI_COMM_WORLD, so its messages never mix with
// a collective's. A message is a length, then its bytes in chunks of at most 1 GiB (MPI
// counts are int); MPI keeps the messages of one sender and tag in order.
//
// A rank that dies ends the job through mpirun; one that throws ends it through
// MPI_Abort (run_guarded). Waits nap between polls (they do not spin a core) and say
// every minute what they wait for.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <vector>

namespace areal {

struct Message {
  int source = -1;
  std::vector<char> bytes;
};

class Mailbox {
 public:
  // Collective over every rank of the job (MPI_Comm_dup of MPI_COMM_WORLD).
  Mailbox();
  // Waits for the posted messages to be delivered, unless an exception is unwinding
  // the stack (the job is ending; a receiver that waits for this rank would hang it).
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  int rank() const { return rank_; }

  // Sends `bytes` to world rank `dest` without waiting; the mailbox keeps them until
  // they are delivered (progress(), flush()).
  void post(int dest, int tag, std::vector<char> bytes);
  // Sends and returns once the receiver has the bytes (the caller's buffer is free).
  void send(int dest, int tag, const std::vector<char>& bytes);
  // Raw bytes of a known size, without the length (the receiver knows it): for weights,
  // straight from a tensor's memory. Returns once delivered.
  void send_raw(int dest, int tag, const void* data, int64_t bytes);
  void receive_raw(int source, int tag, void* data, int64_t bytes);

  // Whether a message with `tag` from `source` (-1: any) has arrived.
  bool arrived(int tag, int source = -1);
  // The next message with `tag` from `source` (-1: any) if one has arrived.
  std::optional<Message> poll(int tag, int source = -1);
  // Waits for one; `what` names it in the minute-by-minute log line.
  Message receive(int tag, int source, const std::string& what);

  // Frees the posted messages that were delivered; returns how many are still in flight.
  size_t progress();
  // Waits until every posted message is delivered.
  void flush();

 private:
  void isend_chunks(int dest, int tag, const char* data, int64_t bytes, std::vector<MPI_Request>& requests);

  struct Posted {
    std::vector<char> bytes;
    int64_t length = 0;
    std::vector<MPI_Request> requests;
  };
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::list<Posted> posted_;
};

// A nap for wait loops: starts short so a message that is about to arrive is taken at
// once, grows to a few milliseconds so a long wait costs no CPU.
class Napper {
 public:
  void nap();

 private:
  int64_t naps_ = 0;
};

}  // namespace areal
