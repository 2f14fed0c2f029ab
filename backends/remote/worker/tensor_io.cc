// WorkerServer::Impl's tensor I/O: kSetTensor (bytes land once the stream
// is past the work before them; device memory through staging) and
// kGetTensor (bytes sent once the stream has produced them).
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/remote/worker/internal/buffer_checks.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::BufferRec;
using ::ferry::remote::worker_internal::Incoming;
using ::ferry::remote::worker_internal::ResolveTarget;
using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;
using ::ferry::remote::worker_internal::StreamRec;
using ::ferry::remote::worker_internal::Target;

absl::Status WorkerServer::Impl::SetTensor(const SessionPtr& sp,
                                           const Message& m, Incoming& in) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> b, FindRange(s, m));
  if (in.length != m.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("set_tensor of ", m.size, " bytes carries ", in.length));
  }
  if (b->device != stream->device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer ", b->id, " is not on stream ", m.stream, "'s device"));
  }
  FERRY_ASSIGN_OR_RETURN(Target target, ResolveTarget(*b, m));
  s.stats.client_bytes_in += m.size;
  if (m.size == 0) return absl::OkStatus();
  Incoming data = std::move(in);
  in = Incoming();
  if (b->is_host()) {
    char* dst = b->host(m.offset);
    std::vector<Event> before = Point(*stream);
    const bool idle =
        std::all_of(before.begin(), before.end(),
                    [](const Event& e) { return e.IsComplete(); });
    if (idle && data.desc == nullptr) {
      std::memcpy(dst, data.bytes.data(), data.bytes.size());
      return absl::OkStatus();
    }
    // Land the bytes once the stream no longer uses the old ones; the
    // work after waits for them.
    std::shared_ptr<TimelineSemaphore> gate = Gate(*stream);
    AfterAll(std::move(before), [this, b, dst, gate, data = std::move(data)](
                                    absl::Status st) mutable {
      if (!st.ok()) {
        Drop(data);
        gate->Fail(st);
        return;
      }
      Deliver(std::move(data), dst, [gate, b](absl::Status st) {
        if (st.ok()) {
          (void)gate->Signal(1);
        } else {
          gate->Fail(st);
        }
      });
    });
    return absl::OkStatus();
  }
  // Device memory: into pinned staging, then an async upload in order. The
  // bytes are pulled at once, unless the client asked for them to be read
  // in stream order (they are produced by work the stream waits for).
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> staging,
                         Staging(stream->device, m.size));
  std::vector<Event> before;
  if (m.byte != 0) before = Point(*stream);
  std::shared_ptr<TimelineSemaphore> gate = GateNow(*stream);
  void* dst = staging->base();
  AfterAll(std::move(before),
           [this, dst, gate, data = std::move(data)](absl::Status st) mutable {
             if (!st.ok()) {
               Drop(data);
               gate->Fail(st);
               return;
             }
             Deliver(std::move(data), dst, [gate](absl::Status st) {
               if (st.ok()) {
                 (void)gate->Signal(1);
               } else {
                 gate->Fail(st);
               }
             });
           });
  FERRY_RETURN_IF_ERROR(stream->backend->EnqueueSetTensor(
      *target.tensor, staging->base(), target.offset, m.size));
  AfterAll(Point(*stream),
           [staging, b, ref = std::move(target.ref)](absl::Status) mutable {
             staging.reset();
             ref.reset();
           });
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::GetTensor(const SessionPtr& sp,
                                           const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  absl::StatusOr<std::shared_ptr<BufferRec>> found = FindRange(s, m);
  absl::StatusOr<Target> target = found.ok()
                                      ? ResolveTarget(**found, m)
                                      : absl::StatusOr<Target>(found.status());
  if (target.ok() && m.value != 0) {
    absl::Status value = CheckRecordValue(*stream, m.value);
    if (!value.ok()) target = value;
  }
  std::weak_ptr<Session> weak = sp;
  const uint64_t req = m.req, size = m.size;
  auto send = [this, weak, req, size](absl::Status st, const void* data,
                                      UcxLoop::Done done) {
    SessionPtr s = weak.lock();
    Message r;
    r.kind = static_cast<uint8_t>(ReplyKind::kGetData);
    r.req = req;
    r.set_status(st);
    if (s == nullptr) {
      std::move(done)(absl::UnavailableError("session closed"));
      return;
    }
    if (st.ok()) s->stats.client_bytes_out += size;
    Reply(s, std::move(r), st.ok() ? data : nullptr, st.ok() ? size : 0,
          std::move(done));
  };
  if (!target.ok() || (*found)->device != stream->device) {
    // The client waits for this get: answer it with the error.
    absl::Status st =
        target.ok()
            ? absl::InvalidArgumentError(absl::StrCat(
                  "buffer ", m.buffer, " is not on the stream's device"))
            : target.status();
    send(st, nullptr, [](absl::Status) {});
    return st;
  }
  std::shared_ptr<BufferRec> b = *found;
  if (b->is_host()) {
    const char* src = b->host(m.offset);
    std::vector<Event> produced = Point(*stream);
    // The stream may overwrite the bytes only once they are sent.
    std::shared_ptr<TimelineSemaphore> gate = Gate(*stream);
    AfterAll(
        std::move(produced), [send, src, gate, b](absl::Status st) mutable {
          send(st, src, [gate, b](absl::Status) { (void)gate->Signal(1); });
        });
    if (m.value != 0) RecordValue(*stream, m.value);
    return absl::OkStatus();
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> staging,
                         Staging(stream->device, m.size));
  Flush(*stream);
  FERRY_RETURN_IF_ERROR(stream->backend->EnqueueGetTensor(
      *target->tensor, staging->base(), target->offset, m.size));
  AfterAll(Point(*stream), [send, staging, b, ref = std::move(target->ref)](
                               absl::Status st) mutable {
    ref.reset();
    const void* data = staging->base();
    send(st, data, [staging](absl::Status) mutable { staging.reset(); });
  });
  if (m.value != 0) RecordValue(*stream, m.value);
  return absl::OkStatus();
}

}  // namespace ferry::remote
