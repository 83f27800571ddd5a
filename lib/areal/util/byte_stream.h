// Plain values in and out of a byte buffer, for the messages of asynchronous RL
// (dist/mailbox.h). Both ends are the same binary on the same kind of machine, so
// values travel in their in-memory form.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace areal {

class ByteWriter {
 public:
  template <typename T>
  void put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const char* p = reinterpret_cast<const char*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& values) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<int64_t>(static_cast<int64_t>(values.size()));
    const char* p = reinterpret_cast<const char*>(values.data());
    bytes_.insert(bytes_.end(), p, p + values.size() * sizeof(T));
  }
  void put_string(const std::string& s) { put_vector(std::vector<char>(s.begin(), s.end())); }
  std::vector<char> take() { return std::move(bytes_); }

 private:
  std::vector<char> bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::vector<char>& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T value;
    std::memcpy(&value, take(sizeof(T)), sizeof(T));
    return value;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const int64_t n = get<int64_t>();
    if (n < 0) throw std::runtime_error("a message has a negative length");
    std::vector<T> values(static_cast<size_t>(n));
    if (n > 0) std::memcpy(values.data(), take(static_cast<size_t>(n) * sizeof(T)), static_cast<size_t>(n) * sizeof(T));
    return values;
  }
  std::string get_string() {
    std::vector<char> chars = get_vector<char>();
    return std::string(chars.begin(), chars.end());
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const char* take(size_t n) {
    if (bytes_.size() - at_ < n) throw std::runtime_error("a message ended early (a sender and receiver disagree)");
    const char* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }
  const std::vector<char>& bytes_;
  size_t at_ = 0;
};

}  // namespace areal
