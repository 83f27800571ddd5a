// The rows of parquet files and Arrow IPC files (what Hugging Face's downloads and
// `datasets.save_to_disk` write) as JSON objects: strings, numbers, booleans, nulls,
// lists and structs as JSON has them. Read one record batch (a parquet row group) at
// a time, so a file never sits whole in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace areal {

// `where` is "path: row N" (N from 1, over the file) for messages.
using RowCallback = std::function<void(const nlohmann::json& object, const std::string& where)>;

// Throws std::runtime_error naming the file: unreadable, not parquet (or not Arrow), or
// a column of a type JSON has no value for.
void for_each_parquet_row(const std::string& path, const RowCallback& row);
void for_each_arrow_row(const std::string& path, const RowCallback& row);

// The column names of a parquet file (its schema), without reading the rows.
std::vector<std::string> parquet_columns(const std::string& path);

}  // namespace areal
