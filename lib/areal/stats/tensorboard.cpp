#include "areal/stats/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace areal {
namespace {

uint32_t masked_crc(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protocol-buffer encoding of the few field kinds an Event needs.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }
template <typename T>
void put_fixed(std::string& out, int field, int wire_type, T value) {
  put_key(out, field, wire_type);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (x86, ARM)
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(dir) /
           ("events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time())) + "." + host + ".areal"))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw std::runtime_error(path_ + ": cannot create the TensorBoard event file");
  std::string event;  // Event{wall_time = 1, file_version = 3}
  put_fixed(event, 1, 1, wall_time());
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  std::string summary_value;  // Summary.Value{tag = 1, simple_value = 2}
  put_bytes(summary_value, 1, tag);
  put_fixed(summary_value, 2, 5, static_cast<float>(value));
  std::string summary;  // Summary{value = 1}
  put_bytes(summary, 1, summary_value);
  std::string event;  // Event{wall_time = 1, step = 2, summary = 5}
  put_fixed(event, 1, 1, wall_time());
  put_key(event, 2, 0);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::flush() { std::fflush(file_); }

void TensorBoardWriter::write_record(const std::string& data) {
  const uint64_t length = data.size();
  const uint32_t length_crc = masked_crc(&length, sizeof length), data_crc = masked_crc(data.data(), data.size());
  std::fwrite(&length, sizeof length, 1, file_);
  std::fwrite(&length_crc, sizeof length_crc, 1, file_);
  std::fwrite(data.data(), 1, data.size(), file_);
  if (std::fwrite(&data_crc, sizeof data_crc, 1, file_) != 1)
    throw std::runtime_error(path_ + ": cannot write the TensorBoard event file");
}

}  // namespace areal
