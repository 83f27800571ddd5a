#include "areal/data/dataset_files.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "areal/data/jsonl.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace fs = std::filesystem;

namespace areal {
namespace {

bool data_format(const fs::path& file, DataFormat& format) {
  const std::string ext = file.extension().string();
  if (ext == ".jsonl" || ext == ".json") format = DataFormat::Jsonl;
  else if (ext == ".parquet") format = DataFormat::Parquet;
  else if (ext == ".arrow") format = DataFormat::Arrow;
  else return false;
  return true;
}

// A file named otherwise: parquet and Arrow by their magic bytes, else JSONL (whose
// reader names the first line that is not a JSON object).
DataFormat sniffed_format(const fs::path& file) {
  char head[6] = {};
  std::ifstream(file, std::ios::binary).read(head, sizeof head);
  if (std::string(head, 4) == "PAR1") return DataFormat::Parquet;
  if (std::string(head, 6) == "ARROW1" || std::string(head, 4) == std::string(4, '\xff')) return DataFormat::Arrow;
  return DataFormat::Jsonl;
}

nlohmann::json read_json_file(const fs::path& file) {
  std::ifstream in(file);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error(cat(file.string(), ": not valid JSON"));
  return j;
}

// A `datasets.save_to_disk` Dataset folder: its state.json names the Arrow files.
std::vector<DataFile> saved_dataset(const fs::path& dir) {
  const nlohmann::json state = read_json_file(dir / "state.json");
  std::vector<DataFile> files;
  if (state.contains("_data_files") && state["_data_files"].is_array())
    for (const auto& f : state["_data_files"])
      if (f.contains("filename") && f["filename"].is_string())
        files.push_back({(dir / f["filename"].get<std::string>()).string(), DataFormat::Arrow});
  if (files.empty()) throw std::runtime_error(cat((dir / "state.json").string(), ": names no data files"));
  return files;
}

// The split a file of a download belongs to: a folder named by it between the root and
// the file, else its name up to the first '-' ("train-00000-of-00001" -> "train").
bool in_split(const fs::path& relative, const std::string& split) {
  for (auto it = relative.begin(); it != relative.end() && std::next(it) != relative.end(); ++it)
    if (it->string() == split) return true;
  const std::string stem = relative.stem().string();
  return stem.substr(0, stem.find('-')) == split;
}

const std::set<std::string> kSplitNames = {"train", "test", "validation", "valid", "dev", "eval"};

std::string split_of(const fs::path& relative) {
  for (const std::string& s : kSplitNames)
    if (in_split(relative, s)) return s;
  return "";
}

// The config folder of a file of a download (gsm8k's main/, socratic/): its first
// folder below the root unless that is a split's folder or `data`; "" for none.
std::string config_of(const fs::path& relative) {
  if (std::distance(relative.begin(), relative.end()) < 2) return "";
  const std::string first = relative.begin()->string();
  return first == "data" || kSplitNames.count(first) ? "" : first;
}

std::vector<DataFile> downloaded(const fs::path& root, const std::string& split) {
  std::vector<fs::path> data;  // relative to root
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name.starts_with(".") || it.depth() >= 3)) {  // .cache/huggingface, deep trees
      it.disable_recursion_pending();
      continue;
    }
    DataFormat format;
    if (it->is_regular_file() && data_format(it->path(), format) && name != "dataset_info.json")
      data.push_back(fs::relative(it->path(), root));
  }
  if (data.empty())
    throw std::runtime_error(cat(root.string(), ": no dataset files in the folder (.parquet, .arrow, .jsonl)"));
  std::sort(data.begin(), data.end());
  std::vector<fs::path> chosen;
  std::set<std::string> splits;
  for (const fs::path& f : data) {
    if (in_split(f, split)) chosen.push_back(f);
    if (std::string s = split_of(f); !s.empty()) splits.insert(s);
  }
  if (chosen.empty()) {
    if (!splits.empty())
      throw std::runtime_error(cat(root.string(), ": no split '", split, "' (the folder has ",
                                   join(std::vector<std::string>(splits.begin(), splits.end()), ", "),
                                   "; choose with train_dataset.split / valid_dataset.split)"));
    chosen = data;  // shards without split names: the whole folder is the dataset
  }
  std::map<std::string, std::vector<fs::path>> by_config;
  for (const fs::path& f : chosen) by_config[config_of(f)].push_back(f);
  if (by_config.size() > 1) {
    std::string pick;
    for (const char* preferred : {"main", "default"})
      if (by_config.count(preferred)) pick = preferred;
    if (pick.empty()) {
      std::vector<std::string> names;
      for (const auto& [name, files] : by_config) names.push_back(name.empty() ? "(top level)" : name);
      throw std::runtime_error(cat(root.string(), ": the download has several configs (", join(names, ", "),
                                   "); point the path at one of their folders"));
    }
    chosen = by_config[pick];
  }
  std::vector<DataFile> files;
  for (const fs::path& f : chosen) {
    DataFormat format;
    data_format(f, format);
    files.push_back({(root / f).string(), format});
  }
  return files;
}

}  // namespace

std::vector<DataFile> dataset_files(const std::string& path, const std::string& split) {
  const fs::path p(path);
  if (!fs::exists(p)) throw std::runtime_error(cat(path, ": cannot read the dataset (no such file or folder)"));
  if (!fs::is_directory(p)) {
    DataFormat format;
    if (!data_format(p, format)) format = sniffed_format(p);
    return {{path, format}};
  }
  if (fs::exists(p / "dataset_dict.json")) {  // save_to_disk of a DatasetDict
    const nlohmann::json dict = read_json_file(p / "dataset_dict.json");
    std::vector<std::string> splits;
    if (dict.contains("splits") && dict["splits"].is_array())
      for (const auto& s : dict["splits"]) splits.push_back(s.get<std::string>());
    if (std::find(splits.begin(), splits.end(), split) == splits.end())
      throw std::runtime_error(cat(path, ": no split '", split, "' in the saved DatasetDict (it has ", join(splits, ", "),
                                   "; choose with train_dataset.split / valid_dataset.split)"));
    return saved_dataset(p / split);
  }
  if (fs::exists(p / "state.json")) return saved_dataset(p);  // save_to_disk of one Dataset
  return downloaded(p, split);
}

void for_each_dataset_row(const std::string& path, const std::string& split, const RowCallback& row) {
  // Reading and tokenizing millions of rows takes minutes: a line every 10 s says how far
  // it got (rank 0's log; the others read alike).
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  int64_t rows = 0;
  const RowCallback counted = [&](const nlohmann::json& r, const std::string& where) {
    row(r, where);
    if (++rows % 1024 != 0 || Clock::now() - last < std::chrono::seconds(10)) return;
    last = Clock::now();
    log::info(cat(path, ": ", rows, " rows read (", format_fixed(std::chrono::duration<double>(last - start).count(), 0),
                  " s)"));
  };
  for (const DataFile& file : dataset_files(path, split)) {
    switch (file.format) {
      case DataFormat::Jsonl: for_each_jsonl_object(file.path, counted); break;
      case DataFormat::Parquet: for_each_parquet_row(file.path, counted); break;
      case DataFormat::Arrow: for_each_arrow_row(file.path, counted); break;
    }
  }
}

}  // namespace areal
