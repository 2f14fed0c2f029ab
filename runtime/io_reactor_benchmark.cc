// Read throughput of a 1 GiB file: io_uring vs pread vs mmap+memcpy, cold
// (O_DIRECT, or after POSIX_FADV_DONTNEED for mmap) and warm (page cache),
// at 1, 4, 16 and 64 reads of 1 MiB in flight. Set FERRY_IO_BENCH_FILE to
// choose where the file lives (default: /var/tmp/ferry_io_bench.bin).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "ferry/runtime/file.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/when_all.h"

namespace ferry {
namespace {

constexpr int64_t kFileSize = 1ll << 30;
constexpr size_t kBlock = 1 << 20;

const std::string& BenchFile() {
  static const std::string* const path = [] {
    const char* env = std::getenv("FERRY_IO_BENCH_FILE");
    auto* p = new std::string(env ? env : "/var/tmp/ferry_io_bench.bin");
    auto existing = File::Open(*p);
    if (existing.ok() && existing->Size().value_or(0) == kFileSize) return p;
    const int fd = ::open(p->c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FERRY_CHECK(fd >= 0);
    std::vector<uint64_t> chunk(kBlock / sizeof(uint64_t));
    uint64_t x = 88172645463325252ull;
    for (int64_t off = 0; off < kFileSize; off += kBlock) {
      for (auto& w : chunk) w = (x ^= x << 13, x ^= x >> 7, x ^= x << 17);
      FERRY_CHECK(::pwrite(fd, chunk.data(), kBlock, off) ==
                  static_cast<ssize_t>(kBlock));
    }
    ::fsync(fd);
    ::close(fd);
    return p;
  }();
  return *path;
}

// One lane reads blocks lane, lane + depth, ... so `depth` reads are in
// flight at any time.
Task<absl::Status> Lane(IoReactor* io, const File* file, AlignedBuffer* buffer,
                        int lane, int depth) {
  for (int64_t off = int64_t{lane} * kBlock; off < kFileSize;
       off += int64_t{depth} * kBlock) {
    FERRY_CO_RETURN_IF_ERROR(co_await io->Read(*file, buffer->span(), off));
  }
  co_return absl::OkStatus();
}

void ReadWithReactor(benchmark::State& state, bool fallback, bool cold) {
  const int depth = static_cast<int>(state.range(0));
  // The pread fallback needs a thread per read in flight (capped at 16).
  ThreadPool pool(fallback ? std::min(depth, 16) : 1);
  // io_uring lanes resume on the poller thread: a lane only issues its next
  // read, so hopping to the pool would add two thread wake-ups per read.
  auto io = IoReactor::Create(fallback ? &pool : nullptr,
                              {.force_fallback = fallback});
  FERRY_CHECK(io.ok());
  auto file = File::Open(BenchFile(), {.direct = cold});
  if (!file.ok()) {
    state.SkipWithError(std::string(file.status().message()).c_str());
    return;
  }
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < depth; ++i)
    buffers.push_back(*AlignedBuffer::Create(kBlock));
  if (!cold) {  // Warm the page cache.
    FERRY_CHECK(SyncWait(Lane(io->get(), &*file, &buffers[0], 0, 1)).ok());
  }
  for (auto _ : state) {
    std::vector<Task<absl::Status>> lanes;
    for (int i = 0; i < depth; ++i) {
      lanes.push_back(Lane(io->get(), &*file, &buffers[i], i, depth));
    }
    FERRY_CHECK(SyncWait(WhenAllOk(std::move(lanes))).ok());
  }
  state.SetBytesProcessed(state.iterations() * kFileSize);
}

void BM_IoUringCold(benchmark::State& s) { ReadWithReactor(s, false, true); }
void BM_IoUringWarm(benchmark::State& s) { ReadWithReactor(s, false, false); }
void BM_PreadCold(benchmark::State& s) { ReadWithReactor(s, true, true); }
void BM_PreadWarm(benchmark::State& s) { ReadWithReactor(s, true, false); }

// mmap + memcpy with `depth` threads each copying every depth-th block.
void ReadWithMmap(benchmark::State& state, bool cold) {
  const int depth = static_cast<int>(state.range(0));
  auto file = File::Open(BenchFile());
  FERRY_CHECK(file.ok());
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < depth; ++i)
    buffers.push_back(*AlignedBuffer::Create(kBlock));
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      FERRY_CHECK(file->DropCache().ok());
      state.ResumeTiming();
    }
    void* map =
        ::mmap(nullptr, kFileSize, PROT_READ, MAP_SHARED, file->fd(), 0);
    FERRY_CHECK(map != MAP_FAILED);
    ::madvise(map, kFileSize, MADV_SEQUENTIAL);
    std::vector<std::thread> threads;
    for (int lane = 0; lane < depth; ++lane) {
      threads.emplace_back([&, lane] {
        for (int64_t off = int64_t{lane} * kBlock; off < kFileSize;
             off += int64_t{depth} * kBlock) {
          std::memcpy(buffers[lane].data(), static_cast<char*>(map) + off,
                      kBlock);
        }
      });
    }
    for (auto& t : threads) t.join();
    ::munmap(map, kFileSize);
  }
  state.SetBytesProcessed(state.iterations() * kFileSize);
}

void BM_MmapMemcpyCold(benchmark::State& s) { ReadWithMmap(s, true); }
void BM_MmapMemcpyWarm(benchmark::State& s) { ReadWithMmap(s, false); }

#define FERRY_IO_DEPTHS               \
  ->Arg(1)                            \
      ->Arg(4)                        \
      ->Arg(16)                       \
      ->Arg(64)                       \
      ->UseRealTime()                 \
      ->Unit(benchmark::kMillisecond) \
      ->MinTime(2.0)

BENCHMARK(BM_IoUringCold) FERRY_IO_DEPTHS;
BENCHMARK(BM_PreadCold) FERRY_IO_DEPTHS;
BENCHMARK(BM_MmapMemcpyCold) FERRY_IO_DEPTHS;
BENCHMARK(BM_IoUringWarm) FERRY_IO_DEPTHS;
BENCHMARK(BM_PreadWarm) FERRY_IO_DEPTHS;
BENCHMARK(BM_MmapMemcpyWarm) FERRY_IO_DEPTHS;

}  // namespace
}  // namespace ferry
