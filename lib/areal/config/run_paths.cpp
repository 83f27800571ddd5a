#include "areal/config/run_paths.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "areal/util/strings.h"

namespace areal {

std::string run_dir(const Config& cfg) {
  return (std::filesystem::path(cfg.cluster.fileroot) / cfg.experiment_name / cfg.trial_name).string();
}

std::string write_run_file(const Config& cfg, const std::string& name, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path dir = run_dir(cfg);
  fs::create_directories(dir);
  const fs::path path = dir / name;
  const fs::path temp = path.string() + cat(".tmp-", ::getpid());
  {
    std::ofstream out(temp);
    out << text;
    if (!out.flush()) throw std::runtime_error(cat(temp.string(), ": write failed"));
  }
  fs::rename(temp, path);
  return path.string();
}

}  // namespace areal
