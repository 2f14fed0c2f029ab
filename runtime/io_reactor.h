// IoReactor: awaitable positional file I/O.
//
// `co_await io.Read(file, buffer, offset)` reads exactly buffer.size() bytes
// (short reads are continued; end of file is an OutOfRange error naming the
// file and offset); ReadUpTo stops quietly at end of file. Two
// implementations:
//   - io_uring (liburing). Progress is made by one poller thread that owns the
//     ring: callers queue requests and wake it through an eventfd that the
//     ring itself watches, so everything queued while the poller was busy is
//     submitted in one io_uring_submit (batched). Completions resume the
//     awaiting coroutine on `resume_on` (or inline on the poller thread).
//   - pread on a thread pool, used when io_uring_queue_init fails (containers
//     often forbid io_uring) or when IoReactorOptions::force_fallback is set.
// Destroying a reactor with I/O in flight waits for that I/O to finish and
// resumes its waiters; requests made after destruction began fail.
#ifndef FERRY_RUNTIME_IO_REACTOR_H_
#define FERRY_RUNTIME_IO_REACTOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/file.h"
#include "ferry/runtime/task.h"

namespace ferry {

struct IoReactorOptions {
  // Submission queue entries (and the most I/Os in flight at once).
  int queue_depth = 256;
  // Use the pread fallback even where io_uring works (for tests).
  bool force_fallback = false;
};

// Thread-safe.
class IoReactor {
 public:
  // Creates an io_uring reactor, or the pread fallback if io_uring cannot be
  // set up here (said once on stderr). Does not take ownership of `executor`,
  // which must outlive the reactor: fallback reads run on it, and completed
  // io_uring reads resume on it (nullptr: on the poller thread; not allowed
  // for the fallback).
  static absl::StatusOr<std::unique_ptr<IoReactor>> Create(
      Executor* executor, IoReactorOptions options = {});

  virtual ~IoReactor() = default;

  // "io_uring" or "pread".
  virtual absl::string_view name() const = 0;

  // Reads exactly dst.size() bytes at `offset`.
  Task<absl::Status> Read(const File& file, absl::Span<std::byte> dst,
                          int64_t offset);
  // Reads up to dst.size() bytes at `offset`, fewer only at end of file.
  Task<absl::StatusOr<size_t>> ReadUpTo(const File& file,
                                        absl::Span<std::byte> dst,
                                        int64_t offset);
  // Writes all of `src` at `offset`.
  Task<absl::Status> Write(const File& file, absl::Span<const std::byte> src,
                           int64_t offset);

 protected:
  enum class Kind { kRead, kWrite };
  // One transfer. `stop_at_eof`: a read reaching end of file ends it without
  // error. Returns the bytes transferred.
  virtual Task<absl::StatusOr<size_t>> Transfer(Kind kind, const File& file,
                                                std::byte* data, size_t length,
                                                int64_t offset,
                                                bool stop_at_eof) = 0;
};

}  // namespace ferry

#endif  // FERRY_RUNTIME_IO_REACTOR_H_
