// Where a dataset's rows are: `train_dataset.path` as users have it.
//   a file          .jsonl / .json (one object per line), .parquet, .arrow
//   save_to_disk    a DatasetDict folder (dataset_dict.json; the split's subfolder) or a
//                   Dataset folder (state.json naming its .arrow files)
//   a download      a folder as `huggingface-cli download --repo-type dataset` leaves it:
//                   shards named by split (train-00000-of-00001.parquet, test.parquet,
//                   or in a folder named by the split), maybe under config folders
//                   (gsm8k's main/ and socratic/: main or default is taken when there
//                   are several, else the path must name one)
//   shards          a folder of data files without split names: all of them
// The split matters for folders only (a file is what it is).
#pragma once

#include <string>
#include <vector>

#include "areal/data/arrow_rows.h"

namespace areal {

enum class DataFormat { Jsonl, Parquet, Arrow };

struct DataFile {
  std::string path;
  DataFormat format;
};

// The files of `split` under `path`, in order. Throws std::runtime_error naming the
// path: missing, no data files, no such split (naming the splits there), ambiguous
// config folders, a file of another kind.
std::vector<DataFile> dataset_files(const std::string& path, const std::string& split);

// Every row of the dataset as a JSON object, streamed file by file. `where` names the
// file and the row (JSONL: its line).
void for_each_dataset_row(const std::string& path, const std::string& split, const RowCallback& row);

}  // namespace areal
