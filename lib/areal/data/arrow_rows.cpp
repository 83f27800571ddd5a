#include "areal/data/arrow_rows.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>

#include <stdexcept>

namespace areal {
namespace {

std::runtime_error failure(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": " + what);
}

template <typename T>
T value_or_throw(arrow::Result<T> result, const std::string& path, const std::string& what) {
  if (!result.ok()) throw failure(path, what + " (" + result.status().message() + ")");
  return std::move(result).ValueUnsafe();
}

// One value of `array` as JSON.
nlohmann::json to_json(const arrow::Array& array, int64_t i) {
  if (array.IsNull(i)) return nullptr;
  switch (array.type_id()) {
    case arrow::Type::NA: return nullptr;
    case arrow::Type::BOOL: return static_cast<const arrow::BooleanArray&>(array).Value(i);
    case arrow::Type::INT8: return static_cast<const arrow::Int8Array&>(array).Value(i);
    case arrow::Type::INT16: return static_cast<const arrow::Int16Array&>(array).Value(i);
    case arrow::Type::INT32: return static_cast<const arrow::Int32Array&>(array).Value(i);
    case arrow::Type::INT64: return static_cast<const arrow::Int64Array&>(array).Value(i);
    case arrow::Type::UINT8: return static_cast<const arrow::UInt8Array&>(array).Value(i);
    case arrow::Type::UINT16: return static_cast<const arrow::UInt16Array&>(array).Value(i);
    case arrow::Type::UINT32: return static_cast<const arrow::UInt32Array&>(array).Value(i);
    case arrow::Type::UINT64: return static_cast<const arrow::UInt64Array&>(array).Value(i);
    case arrow::Type::FLOAT: return static_cast<const arrow::FloatArray&>(array).Value(i);
    case arrow::Type::DOUBLE: return static_cast<const arrow::DoubleArray&>(array).Value(i);
    case arrow::Type::STRING: return std::string(static_cast<const arrow::StringArray&>(array).GetView(i));
    case arrow::Type::LARGE_STRING:
      return std::string(static_cast<const arrow::LargeStringArray&>(array).GetView(i));
    case arrow::Type::STRING_VIEW:
      return std::string(static_cast<const arrow::StringViewArray&>(array).GetView(i));
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::FIXED_SIZE_LIST: {
      std::shared_ptr<arrow::Array> items =
          array.type_id() == arrow::Type::LIST         ? static_cast<const arrow::ListArray&>(array).value_slice(i)
          : array.type_id() == arrow::Type::LARGE_LIST ? static_cast<const arrow::LargeListArray&>(array).value_slice(i)
                                                       : static_cast<const arrow::FixedSizeListArray&>(array).value_slice(i);
      nlohmann::json out = nlohmann::json::array();
      for (int64_t k = 0; k < items->length(); ++k) out.push_back(to_json(*items, k));
      return out;
    }
    case arrow::Type::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(array);
      nlohmann::json out = nlohmann::json::object();
      for (int f = 0; f < s.num_fields(); ++f) out[s.struct_type()->field(f)->name()] = to_json(*s.field(f), i);
      return out;
    }
    case arrow::Type::DICTIONARY: {
      const auto& d = static_cast<const arrow::DictionaryArray&>(array);
      return to_json(*d.dictionary(), d.GetValueIndex(i));
    }
    default:
      throw std::runtime_error("a column of type " + array.type()->ToString() + " (not a string, number, "
                               "boolean, list or struct)");
  }
}

// Rows of one record batch; `done` counts the rows before it, for `where`.
void batch_rows(const arrow::RecordBatch& batch, const std::string& path, int64_t& done, const RowCallback& row) {
  const auto& schema = *batch.schema();
  for (int64_t i = 0; i < batch.num_rows(); ++i) {
    const std::string where = path + ": row " + std::to_string(done + i + 1);
    nlohmann::json object = nlohmann::json::object();
    for (int c = 0; c < batch.num_columns(); ++c) {
      try {
        object[schema.field(c)->name()] = to_json(*batch.column(c), i);
      } catch (const std::runtime_error& e) {
        throw failure(path, "field '" + schema.field(c)->name() + "' is " + e.what());
      }
    }
    row(object, where);
  }
  done += batch.num_rows();
}

std::unique_ptr<parquet::arrow::FileReader> open_parquet(const std::string& path) {
  auto file = value_or_throw(arrow::io::ReadableFile::Open(path), path, "cannot read the dataset");
  try {
    return value_or_throw(parquet::arrow::OpenFile(file, arrow::system_memory_pool()), path, "not a parquet file");
  } catch (const parquet::ParquetException& e) {
    throw failure(path, std::string("not a parquet file (") + e.what() + ")");
  }
}

}  // namespace

void for_each_parquet_row(const std::string& path, const RowCallback& row) {
  // One row group at a time, from the system allocator (the wheel's default pool keeps
  // what it freed): a 1 GB file streams in tens of MiB (bench/run_data.sh).
  std::unique_ptr<parquet::arrow::FileReader> reader = open_parquet(path);
  int64_t done = 0;
  for (int g = 0; g < reader->num_row_groups(); ++g) {
    std::shared_ptr<arrow::Table> group;
    if (arrow::Status s = reader->ReadRowGroup(g, &group); !s.ok())
      throw failure(path, "cannot read row group " + std::to_string(g) + ": " + s.message());
    arrow::TableBatchReader batches(*group);
    std::shared_ptr<arrow::RecordBatch> batch;
    while (batches.ReadNext(&batch).ok() && batch) batch_rows(*batch, path, done, row);
  }
}

std::vector<std::string> parquet_columns(const std::string& path) {
  std::shared_ptr<arrow::Schema> schema;
  if (arrow::Status s = open_parquet(path)->GetSchema(&schema); !s.ok()) throw failure(path, s.message());
  return schema->field_names();
}

void for_each_arrow_row(const std::string& path, const RowCallback& row) {
  // datasets writes the IPC stream format; the IPC file format (Feather v2) is read too.
  auto file = value_or_throw(arrow::io::ReadableFile::Open(path), path, "cannot read the dataset");
  int64_t done = 0;
  arrow::ipc::IpcReadOptions options = arrow::ipc::IpcReadOptions::Defaults();
  options.memory_pool = arrow::system_memory_pool();  // freed batches go back: the pools of the wheel keep them
  if (auto stream = arrow::ipc::RecordBatchStreamReader::Open(file, options); stream.ok()) {
    std::shared_ptr<arrow::RecordBatchReader> reader = *stream;
    while (true) {
      std::shared_ptr<arrow::RecordBatch> batch;
      if (arrow::Status s = reader->ReadNext(&batch); !s.ok()) throw failure(path, "cannot read: " + s.message());
      if (!batch) return;
      batch_rows(*batch, path, done, row);
    }
  }
  auto reader = value_or_throw(arrow::ipc::RecordBatchFileReader::Open(file, options), path,
                               "not an Arrow file (neither the IPC stream nor the IPC file format)");
  for (int b = 0; b < reader->num_record_batches(); ++b)
    batch_rows(*value_or_throw(reader->ReadRecordBatch(b), path, "cannot read"), path, done, row);
}

}  // namespace areal
