// WorkerServer::Impl's stream commands: kCreateStream (quotas on streams
// and their threads), kDestroyStream, kRecord, kWaitStream, kWaitGate,
// kSignalGate, kResetStream.
#include <algorithm>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;
using ::ferry::remote::worker_internal::StreamRec;

namespace {

// The threads a stream of backend `params` runs: its own, and a cpu
// stream's threads=N (without it, as many as the host has).
int StreamThreads(absl::string_view params) {
  int threads = 0;
  for (absl::string_view param :
       absl::StrSplit(params, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(param, absl::MaxSplits('=', 1));
    int n = 0;
    if (kv.first == "threads" && absl::SimpleAtoi(kv.second, &n) && n > 0) {
      threads = std::min(n, 1 << 20);
    }
  }
  if (threads == 0) {
    threads =
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  return threads + 1;
}

}  // namespace

absl::Status WorkerServer::Impl::CreateStream(const SessionPtr& sp,
                                              const Message& m) {
  Session& s = *sp;
  if (m.device >= options_.devices.size()) {
    return absl::NotFoundError(absl::StrCat("no device ", m.device));
  }
  const WorkerQuotas& q = options_.quotas;
  const int threads = StreamThreads(m.text);
  if (s.streams.size() >= static_cast<size_t>(q.max_session_streams) ||
      worker_streams_ >= q.max_worker_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("streams: this session has ", s.streams.size(), " (limit ",
                     q.max_session_streams, "), the worker ", worker_streams_,
                     " (limit ", q.max_worker_streams, ")"));
  }
  if (threads > q.max_session_threads - s.threads ||
      threads > q.max_worker_threads - worker_threads_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a stream of ", threads, " threads: this session has ", s.threads,
        " (limit ", q.max_session_threads, "), the worker ", worker_threads_,
        " (limit ", q.max_worker_threads, ")"));
  }
  absl::StatusOr<std::unique_ptr<Backend>> made;
  try {
    made = options_.devices[m.device]->CreateBackend(m.text);
  } catch (const std::system_error& e) {
    // Out of threads: this stream is refused, the worker lives.
    made = absl::ResourceExhaustedError(
        absl::StrCat("starting the stream's threads: ", e.what()));
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, std::move(made));
  auto stream = std::make_shared<StreamRec>();
  stream->id = s.next_id++;
  stream->device = m.device;
  stream->backend = std::move(backend);
  stream->threads = threads;
  s.threads += threads;
  worker_threads_ += threads;
  ++worker_streams_;
  s.streams[stream->id] = stream;
  Result(sp, m.req, absl::OkStatus(), stream->id);
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::DestroyStream(const SessionPtr& sp,
                                               const Message& m) {
  Session& s = *sp;
  auto it = s.streams.find(m.stream);
  if (it == s.streams.end()) {
    return absl::NotFoundError(absl::StrCat("no stream ", m.stream));
  }
  std::shared_ptr<StreamRec> stream = std::move(it->second);
  s.streams.erase(it);
  s.threads -= stream->threads;
  worker_threads_ -= stream->threads;
  --worker_streams_;
  AfterAll(Point(*stream), [stream](absl::Status) mutable { stream.reset(); });
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::Record(const SessionPtr& sp,
                                        const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  FERRY_RETURN_IF_ERROR(CheckRecordValue(*stream, m.value));
  std::vector<Event> point = RecordValue(*stream, m.value);
  std::weak_ptr<Session> weak = sp;
  const uint64_t stream_id = m.stream, value = m.value;
  AfterAll(std::move(point), [this, weak, stream_id, value](absl::Status st) {
    SessionPtr s = weak.lock();
    if (s == nullptr || s->closed) return;
    Message r;
    r.stream = stream_id;
    r.value = value;
    if (st.ok()) {
      r.kind = static_cast<uint8_t>(ReplyKind::kSignaled);
    } else {
      r.kind = static_cast<uint8_t>(ReplyKind::kStreamFailed);
      r.set_status(st);
    }
    Reply(s, std::move(r));
  });
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::WaitStream(const SessionPtr& sp,
                                            const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  FERRY_ASSIGN_OR_RETURN(StreamRec * src, FindStream(s, m.src_stream));
  if (m.value > src->last_value) {
    return absl::InvalidArgumentError(
        absl::StrCat("wait for value ", m.value, " of stream ", m.src_stream,
                     ", which recorded only up to ", src->last_value));
  }
  // A stream is after its own records already.
  if (stream == src) return absl::OkStatus();
  auto it = src->records.find(m.value);
  // Older records were dropped once later ones completed.
  if (it == src->records.end()) return absl::OkStatus();
  for (const Event& e : it->second) AddPending(*stream, e);
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::WaitGate(const SessionPtr& sp,
                                          const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  if (s.gates.count(m.id) > 0 || s.gates.size() >= 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("gate ", m.id, " is in use (or too many gates)"));
  }
  s.gates[m.id] = Gate(*stream);
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::SignalGate(const SessionPtr& sp,
                                            const Message& m) {
  Session& s = *sp;
  auto it = s.gates.find(m.id);
  if (it == s.gates.end()) {
    Result(sp, 0, absl::NotFoundError(absl::StrCat("no gate ", m.id)));
    return absl::OkStatus();
  }
  if (m.code == 0) {
    (void)it->second->Signal(1);
  } else {
    it->second->Fail(m.status());
  }
  s.gates.erase(it);
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::ResetStream(const SessionPtr& sp,
                                             const Message& m) {
  Session& s = *sp;
  auto it = s.streams.find(m.stream);
  if (it == s.streams.end()) {
    return absl::NotFoundError(absl::StrCat("no stream ", m.stream));
  }
  std::shared_ptr<StreamRec> stream = it->second;
  std::weak_ptr<Session> weak = sp;
  const uint64_t req = m.req;
  AfterAll(Point(*stream), [this, weak, stream, req](absl::Status) {
    // Done (or failed): clearing it does not block.
    absl::Status st = stream->backend->Synchronize();
    stream->pending.clear();
    SessionPtr s = weak.lock();
    if (s != nullptr) Result(s, req, absl::OkStatus());
  });
  return absl::OkStatus();
}

}  // namespace ferry::remote
