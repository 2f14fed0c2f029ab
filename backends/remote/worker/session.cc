// WorkerServer::Impl's sessions: finding what a command names (a stream, a
// buffer, a range of one, a buffer a device can use), staging memory, and
// ending a session (everything it holds released once its streams drain).
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/backends/remote/worker/internal/buffer_checks.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::BufferRec;
using ::ferry::remote::worker_internal::RangeError;
using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;
using ::ferry::remote::worker_internal::StreamRec;

absl::StatusOr<StreamRec*> WorkerServer::Impl::FindStream(Session& s,
                                                          uint64_t id) {
  auto it = s.streams.find(id);
  if (it == s.streams.end()) {
    return absl::NotFoundError(absl::StrCat("no stream ", id));
  }
  return it->second.get();
}

absl::StatusOr<Buffer*> WorkerServer::Impl::DeviceBuffer(
    Session& s, const Device& device, uint64_t id,
    std::vector<std::shared_ptr<BufferRec>>* held) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> b, FindBuffer(s, id));
  if (!device.SupportsBufferType(b->buffer->type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer ", id, " is memory ", device.name(), " cannot use"));
  }
  held->push_back(b);
  return b->buffer.get();
}

absl::StatusOr<std::shared_ptr<BufferRec>> WorkerServer::Impl::FindBuffer(
    Session& s, uint64_t id) {
  auto it = s.buffers.find(id);
  if (it == s.buffers.end()) {
    return absl::NotFoundError(absl::StrCat("no buffer ", id));
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<BufferRec>> WorkerServer::Impl::FindRange(
    Session& s, const Message& m) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> b, FindBuffer(s, m.buffer));
  const uint64_t size = b->buffer->size();
  if (m.offset > size || m.size > size - m.offset) {
    return RangeError(CmdName(m.cmd()), m.offset, m.size, *b);
  }
  return b;
}

absl::StatusOr<std::shared_ptr<Buffer>> WorkerServer::Impl::Staging(
    uint32_t device, size_t size) {
  Device* d = options_.devices[device];
  BufferType* type = d->host_buffer_type();
  static HostBufferType* plain =
      new HostBufferType("remote_staging", 64, nullptr);
  if (type == nullptr) type = plain;
  return staging_pool_.Acquire(*type, size);
}

void WorkerServer::Impl::CloseSession(const SessionPtr& s,
                                      absl::string_view why, bool close_ep) {
  if (s->closed) return;
  s->closed = true;
  SetTracing(*s, false);
  const absl::Status gone =
      absl::CancelledError(absl::StrCat("session ", s->id, " ended: ", why));
  for (auto& [seq, held] : s->held) Drop(held.in);
  s->held.clear();
  for (auto& [id, gate] : s->gates) gate->Fail(gone);
  s->gates.clear();
  for (auto& [id, t] : s->transfers) {
    Drop(t->data);
    t->gate->Fail(gone);
  }
  s->transfers.clear();
  for (auto& [id, early] : s->early_peer_data) Drop(early.data);
  s->early_peer_data.clear();
  stats_.buffers -= static_cast<int64_t>(s->buffers.size());
  --stats_.sessions;
  worker_bytes_ -= s->bytes;
  s->bytes = 0;
  for (auto& [id, stream] : s->streams) {
    worker_threads_ -= stream->threads;
    --worker_streams_;
  }
  s->threads = 0;
  s->held_bytes = 0;
  by_ep_.erase(s->ep);
  by_id_.erase(s->id);
  // Everything goes once the streams have drained (their work may still
  // read the buffers).
  auto state = std::make_shared<Session>();
  state->streams = s->streams;
  auto keep =
      std::make_shared<std::tuple<decltype(s->buffers), decltype(s->graphs)>>(
          std::move(s->buffers), std::move(s->graphs));
  ReleaseAfterStreams(*state, keep);
  s->streams.clear();
  auto streams =
      std::make_shared<decltype(state->streams)>(std::move(state->streams));
  ReleaseAfterStreams(*state, streams);
  if (close_ep) ucp_ep_close_nb(s->ep, UCP_EP_CLOSE_MODE_FORCE);
}

}  // namespace ferry::remote
