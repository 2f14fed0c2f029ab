// hello_ferry: a first real ferry program until the pipelined batch-inference
// example lands. It writes a 64 MiB file, reads it back through the io_uring
// reactor with 16 reads in flight while coroutines on the thread pool
// checksum each block as it arrives, checks the result against a plain read,
// and writes a Chrome trace of the run (hello_ferry_trace.json).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/runtime/file.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/trace.h"
#include "ferry/runtime/when_all.h"

namespace {

constexpr int64_t kFileSize = 64 << 20;
constexpr size_t kBlock = 1 << 20;
constexpr int kInFlight = 16;

uint64_t Checksum(const std::byte* data, size_t n) {
  uint64_t sum = 1469598103934665603ull;  // FNV-1a over 8-byte words.
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t word;
    __builtin_memcpy(&word, data + i, 8);
    sum = (sum ^ word) * 1099511628211ull;
  }
  return sum;
}

ferry::Task<absl::StatusOr<uint64_t>> ReadLane(ferry::IoReactor* io,
                                               ferry::ThreadPool* pool,
                                               const ferry::File* file,
                                               int lane, int disk_track,
                                               int cpu_track) {
  FERRY_CO_ASSIGN_OR_RETURN(ferry::AlignedBuffer buffer,
                            ferry::AlignedBuffer::Create(kBlock));
  uint64_t combined = 0;
  for (int64_t off = int64_t{lane} * kBlock; off < kFileSize;
       off += int64_t{kInFlight} * kBlock) {
    const int64_t begin = ferry::TraceRecorder::NowNanos();
    FERRY_CO_RETURN_IF_ERROR(co_await io->Read(*file, buffer.span(), off));
    ferry::TraceRecorder::Global().Record(disk_track, "read", begin,
                                          ferry::TraceRecorder::NowNanos(),
                                          {{"offset", off}});
    co_await pool->Schedule();
    ferry::ScopedTraceSpan span(cpu_track, "checksum");
    combined ^= Checksum(buffer.data(), kBlock) + static_cast<uint64_t>(off);
  }
  co_return combined;
}

absl::Status Run() {
  const std::string path = "/var/tmp/hello_ferry.bin";
  {
    FERRY_ASSIGN_OR_RETURN(
        ferry::File out,
        ferry::File::Open(path,
                          {.write = true, .create = true, .truncate = true}));
    std::vector<uint64_t> block(kBlock / 8);
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int64_t off = 0; off < kFileSize; off += kBlock) {
      for (auto& w : block) w = (x ^= x << 13, x ^= x >> 7, x ^= x << 17);
      if (::pwrite(out.fd(), block.data(), kBlock, off) !=
          static_cast<ssize_t>(kBlock)) {
        return absl::DataLossError(absl::StrCat("short write to ", path));
      }
    }
  }

  ferry::TraceRecorder& trace = ferry::TraceRecorder::Global();
  trace.SetEnabled(true);
  const int disk_track = trace.Track("disk");
  const int cpu_track = trace.Track("pool");

  ferry::ThreadPool pool(2);
  FERRY_ASSIGN_OR_RETURN(auto io, ferry::IoReactor::Create(&pool));
  // O_DIRECT where the filesystem allows it, so the reads really hit disk.
  absl::StatusOr<ferry::File> direct =
      ferry::File::Open(path, {.direct = true});
  FERRY_ASSIGN_OR_RETURN(ferry::File file, direct.ok()
                                               ? std::move(direct)
                                               : ferry::File::Open(path));
  FERRY_RETURN_IF_ERROR(file.DropCache());

  const int64_t start = ferry::TraceRecorder::NowNanos();
  std::vector<ferry::Task<absl::StatusOr<uint64_t>>> lanes;
  for (int lane = 0; lane < kInFlight; ++lane) {
    lanes.push_back(
        ReadLane(io.get(), &pool, &file, lane, disk_track, cpu_track));
  }
  FERRY_ASSIGN_OR_RETURN(std::vector<uint64_t> sums,
                         ferry::SyncWait(ferry::WhenAllOk(std::move(lanes))));
  const double seconds = (ferry::TraceRecorder::NowNanos() - start) / 1e9;
  uint64_t total = 0;
  for (uint64_t s : sums) total ^= s;

  // The same checksum with plain blocking reads, to prove the bytes match.
  FERRY_ASSIGN_OR_RETURN(ferry::File buffered, ferry::File::Open(path));
  uint64_t expected = 0;
  std::vector<std::byte> plain(kBlock);
  for (int64_t off = 0; off < kFileSize; off += kBlock) {
    if (::pread(buffered.fd(), plain.data(), kBlock, off) !=
        static_cast<ssize_t>(kBlock)) {
      return absl::DataLossError("reference read failed");
    }
    expected ^= Checksum(plain.data(), kBlock) + static_cast<uint64_t>(off);
  }
  // `bazel run` starts us in the runfiles tree; write where the user is.
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  const std::string trace_path =
      absl::StrCat(cwd != nullptr ? cwd : ".", "/hello_ferry_trace.json");
  FERRY_RETURN_IF_ERROR(trace.WriteChromeTrace(trace_path));
  std::printf(
      "ferry: read %lld MiB with %s (%s, %d in flight) in %.3f s "
      "(%.2f GB/s), checksummed on a %d-thread pool\n"
      "checksum %016llx, plain pread %016llx: %s\n"
      "trace with %zu spans written to %s (open it in Perfetto)\n",
      static_cast<long long>(kFileSize >> 20), std::string(io->name()).c_str(),
      file.direct() ? "O_DIRECT" : "page cache", kInFlight, seconds,
      kFileSize / seconds / 1e9, pool.num_threads(),
      static_cast<unsigned long long>(total),
      static_cast<unsigned long long>(expected),
      total == expected ? "match" : "MISMATCH", trace.Spans().size(),
      trace_path.c_str());
  return total == expected ? absl::OkStatus()
                           : absl::DataLossError("checksum mismatch");
}

}  // namespace

int main() {
  absl::Status status = Run();
  if (!status.ok()) {
    std::fprintf(stderr, "hello_ferry: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
