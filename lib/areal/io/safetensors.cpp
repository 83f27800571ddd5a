#include "areal/io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "areal/util/strings.h"

namespace areal::io {
namespace {

[[noreturn]] void fail_errno(const std::string& path, const std::string& what) {
  throw CheckpointError(cat(path, ": ", what, ": ", std::strerror(errno)));
}

void read_exact(int fd, char* out, uint64_t bytes, uint64_t offset, const std::string& path) {
  while (bytes > 0) {
    ssize_t n = ::pread(fd, out, std::min<uint64_t>(bytes, 1u << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno(path, "read failed");
    if (n == 0) throw CheckpointError(cat(path, ": truncated (unexpected end of file at byte ", offset, ")"));
    out += n;
    bytes -= n;
    offset += n;
  }
}

void write_all(int fd, const char* data, uint64_t bytes, const std::string& path) {
  while (bytes > 0) {
    ssize_t n = ::write(fd, data, std::min<uint64_t>(bytes, 1u << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno(path, "write failed");
    data += n;
    bytes -= n;
  }
}


}  // namespace

at::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::F64: return at::kDouble;
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::I16: return at::kShort;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::BOOL: return at::kBool;
  }
  return at::kFloat;
}

DType from_scalar_type(at::ScalarType type) {
  for (DType d : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16, DType::I8,
                  DType::U8, DType::BOOL})
    if (to_scalar_type(d) == type) return d;
  throw CheckpointError(cat("dtype ", type, " has no safetensors equivalent"));
}

// ---- reader ------------------------------------------------------------------------

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail_errno(path, "cannot open");
  try {
    struct stat info;
    if (::fstat(fd_, &info) != 0) fail_errno(path, "cannot stat");
    const uint64_t size = static_cast<uint64_t>(info.st_size);
    char first8[8] = {};
    if (size >= 8) read_exact(fd_, first8, 8, 0, path);
    uint64_t length = parse_header_length(std::string_view(first8, size >= 8 ? 8 : size), size, path);
    std::string json(length, '\0');
    read_exact(fd_, json.data(), length, 8, path);
    header_ = parse_header(json, size, path);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), header_(std::move(other.header_)) {
  other.fd_ = -1;
}

const TensorEntry* SafetensorsReader::find(const std::string& name) const {
  for (const auto& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorEntry& SafetensorsReader::entry(const std::string& name) const {
  const TensorEntry* t = find(name);
  if (!t) throw CheckpointError(cat(path_, ": no tensor '", name, "'"));
  return *t;
}

at::Tensor SafetensorsReader::read(const std::string& name) const {
  const TensorEntry& t = entry(name);
  at::Tensor out = at::empty(t.shape, at::TensorOptions().dtype(to_scalar_type(t.dtype)));
  read_exact(fd_, static_cast<char*>(out.data_ptr()), t.end - t.begin, t.begin, path_);
  return out;
}

void SafetensorsReader::read_into(const std::string& name, at::Tensor& out) const {
  const TensorEntry& t = entry(name);
  if (!out.is_cpu() || !out.is_contiguous() || out.numel() != t.numel())
    throw CheckpointError(cat(path_, ": tensor '", name, "' ", shape_text(t.shape),
                              " cannot be read into a buffer of ", out.numel(), " elements",
                              out.is_contiguous() ? "" : " (not contiguous)"));
  if (out.scalar_type() == to_scalar_type(t.dtype)) {
    read_exact(fd_, static_cast<char*>(out.data_ptr()), t.end - t.begin, t.begin, path_);
  } else {
    out.copy_(read(name).view(out.sizes()));
  }
}

void SafetensorsReader::read_range_into(const std::string& name, int64_t first, at::Tensor& out) const {
  const TensorEntry& t = entry(name);
  const int64_t count = out.numel();
  if (!out.is_cpu() || !out.is_contiguous() || first < 0 || first + count > t.numel())
    throw CheckpointError(cat(path_, ": elements [", first, ", ", first + count, ") of tensor '", name, "' ",
                              shape_text(t.shape), " cannot be read into this buffer"));
  const uint64_t element = dtype_size(t.dtype);
  const uint64_t begin = t.begin + static_cast<uint64_t>(first) * element, bytes = static_cast<uint64_t>(count) * element;
  if (out.scalar_type() == to_scalar_type(t.dtype)) {
    read_exact(fd_, static_cast<char*>(out.data_ptr()), bytes, begin, path_);
  } else {
    at::Tensor raw = at::empty({count}, at::TensorOptions().dtype(to_scalar_type(t.dtype)));
    read_exact(fd_, static_cast<char*>(raw.data_ptr()), bytes, begin, path_);
    out.copy_(raw.view(out.sizes()));
  }
}

// ---- writer ------------------------------------------------------------------------

uint64_t TensorSpec::bytes() const {
  uint64_t n = dtype_size(dtype);
  for (auto d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), temp_path_(cat(path, ".tmp-", ::getpid())), specs_(std::move(specs)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& spec : specs_) {
    header[spec.name] = {{"dtype", dtype_name(spec.dtype)}, {"shape", spec.shape},
                         {"data_offsets", {offset, offset + spec.bytes()}}};
    offset += spec.bytes();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_errno(temp_path_, "cannot create");
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  try {
    write_all(fd_, length, 8, temp_path_);
    write_all(fd_, json.data(), json.size(), temp_path_);
  } catch (...) {  // the destructor does not run for a constructor that throws
    ::close(fd_);
    ::unlink(temp_path_.c_str());
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) {  // not finished: leave nothing behind
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void SafetensorsWriter::write(const std::string& name, const at::Tensor& tensor) {
  if (next_ >= specs_.size() || specs_[next_].name != name)
    throw CheckpointError(cat(path_, ": tensor '", name, "' written out of order (expected '",
                              next_ < specs_.size() ? specs_[next_].name : "<none>", "')"));
  const TensorSpec& spec = specs_[next_];
  if (tensor.sizes().vec() != spec.shape)
    throw CheckpointError(cat(path_, ": tensor '", name, "' has shape ", shape_text(tensor.sizes().vec()),
                              ", declared ", shape_text(spec.shape)));
  at::Tensor data = tensor.to(at::kCPU, to_scalar_type(spec.dtype)).contiguous();
  write_all(fd_, static_cast<const char*>(data.data_ptr()), spec.bytes(), temp_path_);
  ++next_;
}

void SafetensorsWriter::finish() {
  if (next_ != specs_.size())
    throw CheckpointError(cat(path_, ": finished after ", next_, " of ", specs_.size(), " tensors"));
  if (::fsync(fd_) != 0) fail_errno(temp_path_, "fsync failed");
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail_errno(path_, "cannot rename the finished file into place");
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, from_scalar_type(t.scalar_type()), t.sizes().vec()});
  SafetensorsWriter writer(path, specs, metadata);
  for (const auto& [name, t] : tensors) writer.write(name, t);
  writer.finish();
}

}  // namespace areal::io
