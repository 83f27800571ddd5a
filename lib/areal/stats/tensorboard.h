// TensorBoard event files without TensorFlow: scalars as `Event` protocol buffers
// (encoded by hand: a handful of fields) in TFRecord framing (length, masked CRC-32C
// of the length, data, masked CRC-32C of the data). TensorBoard, tensorboardX and
// tf.summary read the files as their own.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace areal {

class TensorBoardWriter {
 public:
  // Creates `dir` and a new events.out.tfevents.<seconds>.<host> file in it.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, int64_t step, double value);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

uint32_t crc32c(const void* data, size_t size);  // Castagnoli, as TFRecord uses

}  // namespace areal
