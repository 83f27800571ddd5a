#include "areal/data/record_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "areal/util/strings.h"

namespace areal {
namespace {

constexpr size_t kWriteChunk = 1 << 20;  // appends reach the file in 1 MiB writes

std::string temp_folder() {
  const char* dir = std::getenv("TMPDIR");
  return dir && *dir ? dir : "/tmp";
}

}  // namespace

void put_token_ids(ByteWriter& w, const std::vector<int64_t>& ids) {
  w.put_vector(std::vector<int32_t>(ids.begin(), ids.end()));
}

std::vector<int64_t> get_token_ids(ByteReader& r) {
  const std::vector<int32_t> ids = r.get_vector<int32_t>();
  return {ids.begin(), ids.end()};
}

RecordStore::RecordStore() : folder_(temp_folder()) {
  std::string name = folder_ + "/areal-dataset-XXXXXX";
  fd_ = mkostemp(name.data(), O_CLOEXEC);  // reward and environment workers do not inherit it
  if (fd_ < 0)
    throw std::runtime_error(cat("cannot make the dataset's row file in ", folder_, " (", std::strerror(errno),
                                 "): set TMPDIR to a writable local folder"));
  unlink(name.c_str());  // gone when the process ends, however it ends
}

RecordStore::~RecordStore() {
  if (fd_ >= 0) close(fd_);
}

void RecordStore::append(const std::vector<char>& record) {
  pending_.insert(pending_.end(), record.begin(), record.end());
  offsets_.push_back(offsets_.back() + record.size());
  if (pending_.size() >= kWriteChunk) flush();
}

void RecordStore::flush() {
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = pwrite(fd_, pending_.data() + done, pending_.size() - done, static_cast<off_t>(written_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(cat("writing the dataset's row file in ", folder_, " failed (",
                                   std::strerror(errno), "): set TMPDIR to a folder with room for the dataset"));
    done += static_cast<size_t>(n);
  }
  written_ += pending_.size();
  pending_.clear();
}

std::vector<char> RecordStore::read(size_t i) const {
  const uint64_t begin = offsets_.at(i), end = offsets_.at(i + 1);
  std::vector<char> record(end - begin);
  size_t done = 0;
  while (done < record.size()) {
    const uint64_t at = begin + done;
    if (at >= written_) {  // still in the write buffer
      std::memcpy(record.data() + done, pending_.data() + (at - written_), record.size() - done);
      break;
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(record.size() - done, written_ - at));
    const ssize_t n = pread(fd_, record.data() + done, want, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(cat("reading the dataset's row file failed: ", std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  return record;
}

}  // namespace areal
