// A dataset's rows kept on disk, not in memory: each record (a prompt with its tokens,
// a training sequence) is appended to an unlinked temporary file under $TMPDIR (else
// /tmp) and only its offset stays in memory, 8 bytes a row. A record is read back with
// pread when a step asks for it; what is read often stays in the page cache, which the
// kernel can reclaim, instead of the rank's resident memory. A 1 GB dataset therefore
// costs each rank its offsets, not its text (docs/data.md, "Memory").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "areal/util/byte_stream.h"

namespace areal {

// Token ids in a record: every vocabulary's ids are below 2^31, so 4 bytes each.
void put_token_ids(ByteWriter& w, const std::vector<int64_t>& ids);
std::vector<int64_t> get_token_ids(ByteReader& r);

class RecordStore {
 public:
  RecordStore();  // throws std::runtime_error naming the folder when no file can be made there
  ~RecordStore();
  RecordStore(const RecordStore&) = delete;
  RecordStore& operator=(const RecordStore&) = delete;

  void append(const std::vector<char>& record);
  // Thread-safe once appending is over (pread: no shared file position).
  std::vector<char> read(size_t i) const;
  size_t size() const { return offsets_.size() - 1; }
  uint64_t bytes() const { return offsets_.back(); }  // on disk

 private:
  void flush();
  int fd_ = -1;
  std::string folder_;
  std::vector<uint64_t> offsets_{0};  // record i is [offsets_[i], offsets_[i + 1])
  std::vector<char> pending_;         // appended but not yet written
  uint64_t written_ = 0;
};

}  // namespace areal
