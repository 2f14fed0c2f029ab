// WorkerServer::Impl's commands that report: kPing, kTrace and kTraceSpans
// (a session sees only its own graphs' spans), kEngineStats, kStats.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/device.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/runtime/trace.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;

absl::Status WorkerServer::Impl::Ping(const SessionPtr& sp, const Message& m) {
  Result(sp, m.req, absl::OkStatus(),
         static_cast<uint64_t>(TraceRecorder::NowNanos()));
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::Trace(const SessionPtr& sp, const Message& m) {
  SetTracing(*sp, m.value != 0);
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::TraceSpans(const SessionPtr& sp,
                                            const Message& m) {
  const std::vector<std::string> tracks = TraceRecorder::Global().TrackNames();
  std::vector<WireSpan> spans;
  size_t bytes = 0;
  int64_t next_from = sp->trace_from_ns;
  for (const TraceSpan& t : TraceRecorder::Global().Spans()) {
    if (t.begin_ns < sp->trace_from_ns) continue;
    if (t.track < 0 || static_cast<size_t>(t.track) >= tracks.size()) {
      continue;
    }
    // Another session's work is not this one's to see.
    if (!sp->span_names.contains(t.name)) continue;
    bytes += 24 + tracks[t.track].size() + t.name.size();
    if (bytes > kMaxBlob) break;  // The rest come with the next ask.
    spans.push_back({tracks[t.track], t.name, t.begin_ns, t.end_ns});
    next_from = t.begin_ns + 1;
  }
  sp->trace_from_ns = next_from;
  auto data = std::make_shared<std::string>(EncodeTraceSpans(spans));
  Message r;
  r.kind = static_cast<uint8_t>(ReplyKind::kResult);
  r.req = m.req;
  Reply(sp, std::move(r), data->data(), data->size(), [data](absl::Status) {});
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::EngineStats(const SessionPtr& sp,
                                             const Message& m) {
  if (m.device >= options_.devices.size()) {
    return absl::NotFoundError(absl::StrCat("no device ", m.device));
  }
  Message r;
  r.kind = static_cast<uint8_t>(ReplyKind::kResult);
  r.req = m.req;
  for (const DeviceCounters& e : options_.devices[m.device]->engine_stats()) {
    absl::StrAppend(&r.text, e.name, "\t", e.busy_ns, "\t", e.ops, "\t",
                    e.bytes, "\n");
  }
  Reply(sp, std::move(r));
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::Stats(const SessionPtr& sp, const Message& m) {
  Message r;
  r.kind = static_cast<uint8_t>(ReplyKind::kResult);
  r.req = m.req;
  // The session's own counters; of the worker, only how many
  // sessions are open.
  const WorkerStats& own = sp->stats;
  r.text =
      absl::StrCat(own.client_bytes_in, ",", own.client_bytes_out, ",",
                   own.peer_bytes_in, ",", own.peer_bytes_out, ",",
                   stats_.sessions, ",", own.buffers, ",", own.graphs_defined);
  Reply(sp, std::move(r));
  return absl::OkStatus();
}

void WorkerServer::Impl::SetTracing(Session& s, bool on) {
  if (on == s.tracing) return;
  s.tracing = on;
  if (on) {
    s.trace_from_ns = TraceRecorder::NowNanos();
    // A fresh recording: spans no session asked for go.
    if (tracing_sessions_++ == 0) {
      TraceRecorder::Global().Clear();
      TraceRecorder::Global().SetEnabled(true);
    }
  } else if (--tracing_sessions_ == 0) {
    // Spans stay for a kTraceSpans after the recording.
    TraceRecorder::Global().SetEnabled(false);
  }
}

}  // namespace ferry::remote
