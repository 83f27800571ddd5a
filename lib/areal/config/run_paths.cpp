#include "areal/config/run_paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "areal/util/strings.h"

namespace areal {

std::string run_dir(const Config& cfg) {
  return (std::filesystem::path(cfg.cluster.fileroot) / cfg.experiment_name / cfg.trial_name).string();
}

std::string write_run_file(const Config& cfg, const std::string& name, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(run_dir(cfg)) / name;
  fs::create_directories(path.parent_path());  // `name` may hold a folder (eval/summary.json)
  const fs::path temp = path.string() + cat(".tmp-", ::getpid());
  {
    std::ofstream out(temp);
    out << text;
    if (!out.flush()) throw std::runtime_error(cat(temp.string(), ": write failed"));
  }
  fs::rename(temp, path);
  return path.string();
}

std::ofstream open_run_log(const Config& cfg, const std::string& name, int64_t resumed_step) {
  const std::filesystem::path path = std::filesystem::path(run_dir(cfg)) / name;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw std::runtime_error(cat(path.parent_path().string(), ": cannot create the run directory: ", ec.message()));
  if (resumed_step >= 0 && std::filesystem::is_regular_file(path)) {
    std::string kept, line;
    std::ifstream old(path);
    while (std::getline(old, line)) {
      const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
      if (row.is_object() && row.contains("step") && row["step"].is_number_integer() &&
          row["step"].get<int64_t>() <= resumed_step)
        kept += line + "\n";
    }
    write_run_file(cfg, name, kept);
  }
  std::ofstream out(path, resumed_step >= 0 ? std::ios::app : std::ios::trunc);
  if (!out) throw std::runtime_error(cat(path.string(), ": cannot write: ", std::strerror(errno)));
  return out;
}

}  // namespace areal
