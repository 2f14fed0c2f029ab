// WorkerServer::Impl's stream gates: what a stream's later local work waits
// for (a gate pending until local work is enqueued, or given to the local
// backend at once), points covering everything a stream has so far, records
// of client values for kWaitStream, and callbacks once events complete.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/event.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::StreamRec;

namespace {

constexpr size_t kMaxRecords = 256;
constexpr size_t kMaxPending = 64;

}  // namespace

void WorkerServer::Impl::FailStream(StreamRec& stream, absl::Status status) {
  auto failed = std::make_shared<TimelineSemaphore>(0);
  failed->Fail(std::move(status));
  (void)stream.backend->EnqueueWait(Event(failed, 1));
}

std::shared_ptr<TimelineSemaphore> WorkerServer::Impl::Gate(StreamRec& stream) {
  auto gate = std::make_shared<TimelineSemaphore>(0);
  AddPending(stream, Event(gate, 1));
  return gate;
}

void WorkerServer::Impl::AddPending(StreamRec& stream, const Event& e) {
  if (e.IsComplete() && e.timeline()->status().ok()) return;
  for (const Event& p : stream.pending) {
    if (p.timeline() == e.timeline() && p.value() >= e.value()) return;
  }
  // Each record copies the pending gates: past a few, they go to the local
  // backend now, so waits chained across streams cannot grow them.
  if (stream.pending.size() >= kMaxPending) Flush(stream);
  stream.pending.push_back(e);
}

std::shared_ptr<TimelineSemaphore> WorkerServer::Impl::GateNow(
    StreamRec& stream) {
  Flush(stream);
  auto gate = std::make_shared<TimelineSemaphore>(0);
  (void)stream.backend->EnqueueWait(Event(gate, 1));
  return gate;
}

void WorkerServer::Impl::Flush(StreamRec& stream) {
  for (const Event& e : stream.pending) {
    if (!e.IsComplete()) (void)stream.backend->EnqueueWait(e);
  }
  stream.pending.clear();
}

std::vector<Event> WorkerServer::Impl::Point(StreamRec& stream) {
  std::vector<Event> out = {stream.backend->Record()};
  std::erase_if(stream.pending, [](const Event& e) {
    return e.IsComplete() && e.timeline()->status().ok();
  });
  out.insert(out.end(), stream.pending.begin(), stream.pending.end());
  return out;
}

void WorkerServer::Impl::AfterAll(std::vector<Event> events, UcxLoop::Done fn) {
  struct State {
    size_t left;
    absl::Status status;
    UcxLoop::Done fn;
  };
  auto state =
      std::make_shared<State>(State{events.size() + 1, {}, std::move(fn)});
  auto one = [state](absl::Status st) {
    if (!st.ok() && state->status.ok()) state->status = st;
    if (--state->left == 0) std::move(state->fn)(state->status);
  };
  for (const Event& e : events) loop_->OnEvent(e, one);
  one(absl::OkStatus());
}

void WorkerServer::Impl::ReleaseAfterStreams(Session& s,
                                             std::shared_ptr<void> thing) {
  auto count = std::make_shared<size_t>(s.streams.size() + 1);
  auto release = [count, thing](absl::Status) mutable {
    if (--*count == 0) thing.reset();
  };
  for (auto& [id, stream] : s.streams) AfterAll(Point(*stream), release);
  release(absl::OkStatus());
}

absl::Status WorkerServer::Impl::CheckRecordValue(const StreamRec& stream,
                                                  uint64_t value) {
  if (value > stream.last_value) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("record ", value, " is not above ", stream.last_value));
}

std::vector<Event> WorkerServer::Impl::RecordValue(StreamRec& stream,
                                                   uint64_t value) {
  stream.last_value = value;
  std::vector<Event> point = Point(stream);
  stream.records[value] = point;
  while (stream.records.size() > kMaxRecords) {
    stream.records.erase(stream.records.begin());
  }
  return point;
}

}  // namespace ferry::remote
