#include "areal/dist/mailbox.h"

#include <algorithm>
#include <exception>
#include <chrono>
#include <thread>

#include "areal/dist/mpi_check.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

constexpr int64_t kChunkBytes = int64_t{1} << 30;

int chunk_count(int64_t bytes) { return static_cast<int>((bytes + kChunkBytes - 1) / kChunkBytes); }

}  // namespace

void Napper::nap() {
  // 50 us while a message is likely close, then up to 5 ms.
  const int64_t micros = std::min<int64_t>(5000, 50 << std::min<int64_t>(naps_ / 20, 7));
  ++naps_;
  std::this_thread::sleep_for(std::chrono::microseconds(micros));
}

Mailbox::Mailbox() {
  AREAL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  AREAL_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  AREAL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
}

Mailbox::~Mailbox() {
  // While an error unwinds the stack the receiver may be waiting for this rank (new
  // weights to take): waiting for delivery here would hang both. The error's handler
  // ends the job (run_guarded), so the messages are left behind.
  if (std::uncaught_exceptions() > 0) return;
  try {
    flush();
  } catch (const std::exception& e) {
    log::error(cat("mailbox: ", e.what()));
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void Mailbox::isend_chunks(int dest, int tag, const char* data, int64_t bytes, std::vector<MPI_Request>& requests) {
  for (int64_t at = 0; at < bytes; at += kChunkBytes) {
    MPI_Request request;
    const int n = static_cast<int>(std::min(kChunkBytes, bytes - at));
    AREAL_MPI_CHECK(MPI_Isend(data + at, n, MPI_BYTE, dest, tag, comm_, &request));
    requests.push_back(request);
  }
}

void Mailbox::post(int dest, int tag, std::vector<char> bytes) {
  Posted& p = posted_.emplace_back();
  p.bytes = std::move(bytes);
  p.length = static_cast<int64_t>(p.bytes.size());
  MPI_Request request;
  AREAL_MPI_CHECK(MPI_Isend(&p.length, 1, MPI_INT64_T, dest, tag, comm_, &request));
  p.requests.push_back(request);
  isend_chunks(dest, tag, p.bytes.data(), p.length, p.requests);
  progress();
}

void Mailbox::send(int dest, int tag, const std::vector<char>& bytes) {
  int64_t length = static_cast<int64_t>(bytes.size());
  AREAL_MPI_CHECK(MPI_Send(&length, 1, MPI_INT64_T, dest, tag, comm_));
  send_raw(dest, tag, bytes.data(), length);
}

void Mailbox::send_raw(int dest, int tag, const void* data, int64_t bytes) {
  std::vector<MPI_Request> requests;
  isend_chunks(dest, tag, static_cast<const char*>(data), bytes, requests);
  AREAL_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
}

void Mailbox::receive_raw(int source, int tag, void* data, int64_t bytes) {
  std::vector<MPI_Request> requests(chunk_count(bytes));
  for (int64_t at = 0, i = 0; at < bytes; at += kChunkBytes, ++i) {
    const int n = static_cast<int>(std::min(kChunkBytes, bytes - at));
    AREAL_MPI_CHECK(MPI_Irecv(static_cast<char*>(data) + at, n, MPI_BYTE, source, tag, comm_, &requests[i]));
  }
  AREAL_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
}

bool Mailbox::arrived(int tag, int source) {
  int flag = 0;
  AREAL_MPI_CHECK(MPI_Iprobe(source < 0 ? MPI_ANY_SOURCE : source, tag, comm_, &flag, MPI_STATUS_IGNORE));
  return flag != 0;
}

std::optional<Message> Mailbox::poll(int tag, int source) {
  int flag = 0;
  MPI_Status status;
  AREAL_MPI_CHECK(MPI_Iprobe(source < 0 ? MPI_ANY_SOURCE : source, tag, comm_, &flag, &status));
  if (!flag) return std::nullopt;
  Message m;
  m.source = status.MPI_SOURCE;
  int64_t length = 0;
  AREAL_MPI_CHECK(MPI_Recv(&length, 1, MPI_INT64_T, m.source, tag, comm_, MPI_STATUS_IGNORE));
  m.bytes.resize(static_cast<size_t>(length));
  receive_raw(m.source, tag, m.bytes.data(), length);
  return m;
}

Message Mailbox::receive(int tag, int source, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  auto next_note = start + std::chrono::minutes(1);
  Napper napper;
  for (;;) {
    if (std::optional<Message> m = poll(tag, source)) return std::move(*m);
    progress();
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_note) {
      log::info(cat("still waiting for ", what, " (",
                    std::chrono::duration_cast<std::chrono::seconds>(now - start).count(), " s)"));
      next_note = now + std::chrono::minutes(1);
    }
    napper.nap();
  }
}

size_t Mailbox::progress() {
  for (auto it = posted_.begin(); it != posted_.end();) {
    int done = 0;
    AREAL_MPI_CHECK(MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done,
                                MPI_STATUSES_IGNORE));
    it = done ? posted_.erase(it) : std::next(it);
  }
  return posted_.size();
}

void Mailbox::flush() {
  Napper napper;
  while (progress() > 0) napper.nap();
}

}  // namespace areal
