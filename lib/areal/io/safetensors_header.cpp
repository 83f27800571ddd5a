#include "areal/io/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "areal/util/strings.h"

namespace areal::io {
namespace {

struct DTypeInfo {
  const char* name;
  DType dtype;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {"F64", DType::F64, 8}, {"F32", DType::F32, 4}, {"F16", DType::F16, 2}, {"BF16", DType::BF16, 2},
    {"I64", DType::I64, 8}, {"I32", DType::I32, 4}, {"I16", DType::I16, 2}, {"I8", DType::I8, 1},
    {"U8", DType::U8, 1},   {"BOOL", DType::BOOL, 1},
};

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw CheckpointError(cat(file, ": ", what));
}

TensorEntry parse_entry(const std::string& name, const nlohmann::json& value, uint64_t data_size,
                        const std::string& file) {
  auto bad = [&](const std::string& what) { fail(file, cat("tensor '", name, "': ", what)); };
  if (!value.is_object()) bad("header entry is not an object");
  TensorEntry entry;
  entry.name = name;

  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) bad("no dtype");
  auto known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                            [&](const DTypeInfo& d) { return d.name == dtype->get<std::string>(); });
  if (known == std::end(kDTypes))
    bad(cat("unknown dtype '", dtype->get<std::string>(), "' (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)"));
  entry.dtype = known->dtype;

  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) bad("no shape");
  uint64_t elements = 1;
  for (const auto& dim : *shape) {
    if (!dim.is_number_unsigned() && !(dim.is_number_integer() && dim.get<int64_t>() >= 0))
      bad("shape has a dimension that is not a non-negative integer");
    uint64_t d = dim.get<uint64_t>();
    if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / 2 / d) bad("shape is too large");
    elements *= d;
    entry.shape.push_back(static_cast<int64_t>(d));
  }

  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    bad("data_offsets must be two non-negative integers");
  uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
  if (begin > end) bad(cat("data_offsets [", begin, ", ", end, "] run backwards"));
  if (end > data_size)
    bad(cat("data_offsets [", begin, ", ", end, "] reach past the end of the data (", data_size, " bytes)"));
  if (elements > std::numeric_limits<uint64_t>::max() / known->size) bad("shape is too large");
  if (end - begin != elements * known->size)
    bad(cat("shape ", shape_text(entry.shape), " of ", known->name, " needs ", elements * known->size, " bytes but data_offsets span ",
            end - begin));
  entry.begin = begin;
  entry.end = end;
  return entry;
}

}  // namespace

std::string dtype_name(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

size_t dtype_size(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.size;
  return 0;
}

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

uint64_t parse_header_length(std::string_view first8, uint64_t file_size, const std::string& file) {
  if (first8.size() < 8 || file_size < 8)
    fail(file, cat("truncated: ", file_size, " bytes, shorter than the 8-byte header length"));
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(first8[i]);
  if (length > file_size - 8)
    fail(file, cat("header length ", length, " is larger than the file after it (", file_size - 8,
                   " bytes): truncated or not a safetensors file"));
  if (length > kMaxHeaderBytes) fail(file, cat("header length ", length, " exceeds the limit of ", kMaxHeaderBytes));
  if (length < 2) fail(file, cat("header length ", length, " is too short for a JSON object"));
  return length;
}

SafetensorsHeader parse_header(std::string_view json, uint64_t file_size, const std::string& file) {
  SafetensorsHeader header;
  header.data_start = 8 + json.size();
  if (file_size < header.data_start) fail(file, "truncated inside the header");
  const uint64_t data_size = file_size - header.data_start;

  nlohmann::json root = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) fail(file, "the header is not valid JSON");
  if (!root.is_object()) fail(file, "the header is not a JSON object");

  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(file, "__metadata__ is not an object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) fail(file, cat("__metadata__ '", key, "' is not a string"));
        header.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    header.tensors.push_back(parse_entry(name, value, data_size, file));
  }

  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  // Sorted by start, a span overlaps an earlier one exactly when it starts before the
  // furthest end seen so far (empty tensors occupy no bytes).
  const TensorEntry* furthest = nullptr;
  for (const auto& cur : header.tensors) {
    if (cur.begin == cur.end) continue;
    if (furthest && cur.begin < furthest->end)
      fail(file, cat("tensors '", furthest->name, "' and '", cur.name, "' overlap (bytes [", furthest->begin, ", ",
                     furthest->end, ") and [", cur.begin, ", ", cur.end, ") of the data)"));
    if (!furthest || cur.end > furthest->end) furthest = &cur;
  }
  for (auto& t : header.tensors) {  // to absolute file offsets
    t.begin += header.data_start;
    t.end += header.data_start;
  }
  return header;
}

}  // namespace areal::io
