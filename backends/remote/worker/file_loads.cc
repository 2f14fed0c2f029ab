// WorkerServer::Impl's file loads (kLoadFile): bytes of a file beneath
// --weights_dir into a buffer, opened and read on the blocking pool, never
// on the loop.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/remote/worker/blocking_pool.h"
#include "ferry/backends/remote/worker/internal/buffer_checks.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/backends/remote/worker/open_beneath.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::BufferRec;
using ::ferry::remote::worker_internal::ResolveTarget;
using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;
using ::ferry::remote::worker_internal::StreamRec;
using ::ferry::remote::worker_internal::Target;

namespace {

// Reads [offset, +size) of `relative` beneath `dir` into `dst` (blocks).
absl::Status ReadFileRange(const std::string& dir, const std::string& relative,
                           uint64_t offset, uint64_t size, char* dst) {
  FERRY_ASSIGN_OR_RETURN(int fd, OpenBeneath(dir, relative));
  struct stat st;
  absl::Status result;
  if (fstat(fd, &st) != 0 || offset > static_cast<uint64_t>(st.st_size) ||
      size > static_cast<uint64_t>(st.st_size) - offset) {
    result = absl::OutOfRangeError(absl::StrCat("'", relative, "': bytes [",
                                                offset, ", +", size,
                                                ") are outside the file"));
  }
  uint64_t done = 0;
  while (result.ok() && done < size) {
    const ssize_t n = pread(fd, dst + done, size - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      result = absl::DataLossError(
          absl::StrCat("reading '", relative, "' at ", offset + done, ": ",
                       n == 0 ? "end of file" : strerror(errno)));
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  close(fd);
  return result;
}

}  // namespace

absl::Status WorkerServer::Impl::LoadFile(const SessionPtr& sp,
                                          const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> b, FindRange(s, m));
  FERRY_ASSIGN_OR_RETURN(Target target, ResolveTarget(*b, m));
  if (options_.weights_dir.empty()) {
    return absl::PermissionDeniedError(
        "this worker loads no files (start it with --weights_dir)");
  }
  FERRY_RETURN_IF_ERROR(CheckRelativePath(m.text));
  if (b->device != stream->device) {
    return absl::InvalidArgumentError("buffer is not on the stream's device");
  }
  if (m.value > ~uint64_t{0} - m.size) {
    return absl::OutOfRangeError(absl::StrCat(
        "'", m.text, "': bytes [", m.value, ", +", m.size, ") overflow"));
  }
  if (m.size == 0) return absl::OkStatus();
  std::shared_ptr<Buffer> staging;
  char* dst;
  std::vector<Event> before;
  std::shared_ptr<TimelineSemaphore> gate;
  if (b->is_host()) {
    dst = b->host(m.offset);
    before = Point(*stream);
    gate = Gate(*stream);
  } else {
    FERRY_ASSIGN_OR_RETURN(staging, Staging(stream->device, m.size));
    dst = static_cast<char*>(staging->base());
    gate = GateNow(*stream);
    FERRY_RETURN_IF_ERROR(stream->backend->EnqueueSetTensor(
        *target.tensor, staging->base(), target.offset, m.size));
  }
  // The loop keeps what the read writes into until it is done (released
  // here, not on the pool's thread).
  AfterAll({Event(gate, 1)}, [b, staging](absl::Status) mutable {
    staging.reset();
    b.reset();
  });
  if (staging != nullptr) {
    // The upload after the gate reads the staging through the tensor.
    AfterAll(Point(*stream),
             [staging, ref = std::move(target.ref)](absl::Status) mutable {
               staging.reset();
               ref.reset();
             });
  }
  BlockingPool* pool = pool_.get();
  AfterAll(std::move(before), [pool, dir = options_.weights_dir, name = m.text,
                               dst, size = m.size, file_offset = m.value,
                               gate](absl::Status st) mutable {
    if (!st.ok()) {
      gate->Fail(st);
      return;
    }
    // Opened and read off the loop: a slow disk, a large file or a FIFO
    // must not stall other sessions.
    absl::Status queued = pool->Run([dir = std::move(dir),
                                     name = std::move(name), dst, size,
                                     file_offset, gate] {
      absl::Status result = ReadFileRange(dir, name, file_offset, size, dst);
      if (result.ok()) {
        (void)gate->Signal(1);
      } else {
        gate->Fail(result);
      }
    });
    if (!queued.ok()) gate->Fail(queued);
  });
  return absl::OkStatus();
}

}  // namespace ferry::remote
