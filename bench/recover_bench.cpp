// The cost of a recover checkpoint: the time to write one (every rank its file, fsync,
// the swap) and to read it back (load_recover_checkpoint), beside the raw speed of the
// same bytes on the same disk in the same run: each rank writes one plain file of its
// byte count in 64 MiB write() calls plus fsync, and reads it back with pread. Before
// each read the files' pages are dropped from the page cache (posix_fadvise), so both
// reads come from the disk. Figures are the slowest rank's; the ratio is the figure.
//
//   mpirun -np 2 build/bench/areal_recover_bench MODEL_DIR OUT_DIR [--json FILE]
//
// MODEL_DIR: a config.json (bench/make_bench_model.py); the weights are initialized from
// the seed, the AdamW moments are zeros (their bytes cost the same).
#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/staged_init.h"
#include "areal/optim/adamw.h"
#include "areal/recover/recover_checkpoint.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace fs = std::filesystem;
using namespace areal;

namespace {

// Seconds `work` takes on the slowest rank (all start together).
double slowest_seconds(Communicator& comm, const std::function<void()>& work) {
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  work();
  at::Tensor seconds = at::tensor({std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()},
                                  at::kDouble);
  comm.all_reduce(seconds, ReduceOp::Max);
  return seconds.item<double>();
}

void drop_from_page_cache(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void raw_write(const fs::path& path, std::vector<char>& buffer, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  check(fd >= 0, "cannot create " + path.string());
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, buffer.data(), static_cast<size_t>(std::min<int64_t>(buffer.size(), bytes - done)));
    check(n > 0, "write failed: " + path.string());
    done += n;
  }
  check(::fsync(fd) == 0, "fsync failed: " + path.string());
  ::close(fd);
}

void raw_read(const fs::path& path, std::vector<char>& buffer, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0, "cannot open " + path.string());
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::pread(fd, buffer.data(), static_cast<size_t>(std::min<int64_t>(buffer.size(), bytes - done)),
                              done);
    check(n > 0, "read failed: " + path.string());
    done += n;
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR OUT_DIR [--json FILE]\n", argv[0]);
    return 2;
  }
  const std::string model_dir = argv[1], json_path = argc >= 5 ? argv[4] : "";
  const fs::path out_dir = argv[2];
  return run_guarded([&] {
    Config cfg;
    cfg.model_path = model_dir;
    cfg.init_from_scratch = true;
    cfg.device = "cpu";
    RankInfo me = bootstrap(cfg);
    log::configure(me.rank, me.world_size, "warn", false);
    Communicator comm(me);
    InitResult init = staged_init(cfg, me, comm);
    ShardedAdamW optimizer(init.model->trainable_shards(), cfg.optimizer, comm);
    const fs::path dir = out_dir / "recover";
    if (me.rank == 0) fs::create_directories(out_dir);
    comm.barrier();

    RecoverPoint point;
    point.job = "sft";
    point.steps_done = 1;
    const double write_s = slowest_seconds(comm, [&] { write_recover_checkpoint(dir, point, *init.model, &optimizer, comm); });
    std::optional<RecoverPoint> read = read_recover_point(dir);
    int64_t bytes = 0;  // this rank's file
    char name[64];
    std::snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", me.rank, me.world_size);
    bytes = static_cast<int64_t>(fs::file_size(dir / name));
    drop_from_page_cache(dir / name);
    const double read_s = slowest_seconds(comm, [&] { load_recover_checkpoint(dir, *read, *init.model, &optimizer); });

    std::vector<char> buffer(64 << 20, 1);
    const fs::path raw = out_dir / cat("raw-rank", me.rank, ".bin");
    const double raw_write_s = slowest_seconds(comm, [&] { raw_write(raw, buffer, bytes); });
    drop_from_page_cache(raw);
    const double raw_read_s = slowest_seconds(comm, [&] { raw_read(raw, buffer, bytes); });
    fs::remove(raw);

    at::Tensor total = at::tensor({static_cast<double>(bytes)}, at::kDouble);
    comm.all_reduce(total, ReduceOp::Sum);
    if (me.rank == 0) {
      const double gib = total.item<double>() / (1 << 30);
      std::printf("recover checkpoint of %s at %d ranks: %.2f GiB in all (weights + 2 AdamW moments, float32)\n",
                  model_dir.c_str(), me.world_size, gib);
      std::printf("  write: %.2f s (%.2f GiB/s)   raw write + fsync of the same bytes: %.2f s   ratio %.2f\n", write_s,
                  gib / write_s, raw_write_s, write_s / raw_write_s);
      std::printf("  read:  %.2f s (%.2f GiB/s)   raw pread of the same bytes:        %.2f s   ratio %.2f\n", read_s,
                  gib / read_s, raw_read_s, read_s / raw_read_s);
      if (!json_path.empty()) {
        nlohmann::json figures = {{"world_size", me.world_size}, {"bytes", total.item<double>()},
                                  {"write_seconds", write_s},    {"raw_write_seconds", raw_write_s},
                                  {"read_seconds", read_s},      {"raw_read_seconds", raw_read_s}};
        std::ofstream(json_path) << figures.dump(1) << "\n";
      }
      fs::remove_all(dir);
    }
    comm.barrier();
    finalize();
    return 0;
  });
}
