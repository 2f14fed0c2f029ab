// The scheduler's running half: capture, turns and slots, enqueueing a
// batch's splits and copies on the plan (scheduler_plan.cc makes it).
#include "ferry/sched/scheduler.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/default_executor.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/promise.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/trace.h"

namespace ferry {

namespace {

// Waits for a batch's events, copies its staged outputs to the caller's
// memory, then signals `value` on `timeline` after value - 1 (batches
// complete in order), or fails it.
Task<void> FinishBatch(
    std::vector<std::pair<std::string, Event>> events,
    std::vector<std::pair<const char*, std::pair<void*, size_t>>> staged,
    std::shared_ptr<TimelineSemaphore> timeline, uint64_t value) {
  // Scheduler bookkeeping: never on a caller's executor, which may be
  // blocked waiting for this batch.
  WaitOptions options;
  options.resume_on = &DefaultExecutor();
  // In graph order: the first failure is the split where it happened
  // (those after it fail because they wait for it).
  absl::Status status;
  for (const auto& [where, event] : events) {
    status = co_await event.Wait(options);
    if (!status.ok()) {
      status = AnnotateStatus(std::move(status), where);
      break;
    }
  }
  if (status.ok()) {
    for (const auto& [from, to] : staged)
      std::memcpy(to.first, from, to.second);
    status = co_await Event(timeline, value - 1).Wait(options);
  }
  if (!status.ok()) {
    timeline->Fail(AnnotateStatus(std::move(status), "batch ", value - 1));
    co_return;
  }
  (void)timeline->Signal(value);
}

}  // namespace

// A batch's ticket (taken when made) and its enqueue turn, passed on when
// it goes out of scope once the turn was had.
class Scheduler::TurnGuard {
 public:
  explicit TurnGuard(CopySlots& slots)
      : slots_(slots), ticket_(slots.TakeTicket()) {}
  ~TurnGuard() { Pass(); }
  TurnGuard(const TurnGuard&) = delete;
  TurnGuard& operator=(const TurnGuard&) = delete;
  int64_t ticket() const { return ticket_; }
  int slot() const { return slots_.SlotOf(ticket_); }
  // Blocks until the turn comes, then holds it.
  absl::Status WaitBlocking() {
    FERRY_RETURN_IF_ERROR(
        slots_.turns().WaitBlocking(static_cast<uint64_t>(ticket_)));
    held_ = true;
    return absl::OkStatus();
  }
  // `co_await Wait(options)`, then Hold() once it returned OK.
  TimelineSemaphore::WaitAwaiter Wait(WaitOptions options) {
    return slots_.turns().Wait(static_cast<uint64_t>(ticket_),
                               std::move(options));
  }
  void Hold() { held_ = true; }
  void Pass() {
    if (held_) slots_.PassTurn(ticket_);
    held_ = false;
  }

 private:
  CopySlots& slots_;
  const int64_t ticket_;
  bool held_ = false;
};

// Counts a call that uses the scheduler while it lives (~Scheduler waits for
// it to end); Cancelled if the scheduler is being destroyed. Declared
// before anything else that touches the scheduler, so it ends last.
class Scheduler::CallerGuard {
 public:
  explicit CallerGuard(Scheduler& scheduler) : scheduler_(scheduler) {
    std::lock_guard<std::mutex> lock(scheduler_.callers_mu_);
    ++scheduler_.callers_;
  }
  ~CallerGuard() {
    // Notified under the lock: ~Scheduler may return (and free the
    // mutex) as soon as it sees the count reach zero.
    std::lock_guard<std::mutex> lock(scheduler_.callers_mu_);
    if (--scheduler_.callers_ == 0) scheduler_.callers_cv_.notify_all();
  }
  CallerGuard(const CallerGuard&) = delete;
  CallerGuard& operator=(const CallerGuard&) = delete;

  // Cancelled once the scheduler is being destroyed.
  absl::Status Open() const {
    if (!scheduler_.closing_.load(std::memory_order_acquire)) {
      return absl::OkStatus();
    }
    return absl::CancelledError("the scheduler is being destroyed");
  }

 private:
  Scheduler& scheduler_;
};

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    std::vector<Backend*> backends, SchedulerOptions options) {
  if (backends.empty()) {
    return absl::InvalidArgumentError("scheduler needs at least one backend");
  }
  for (size_t i = 0; i < backends.size(); ++i) {
    if (backends[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheduler backend ", i, " is null"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (backends[j] == backends[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "backend '", backends[i]->name(), "' is listed twice"));
      }
    }
  }
  if (backends.back()->device().type() != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("the last scheduler backend must be the CPU, not '",
                     backends.back()->name(), "'"));
  }
  if (options.n_copies < 0 || options.n_copies > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_copies ", options.n_copies, " is outside [0, 64]"));
  }
  if (options.max_split_inputs < 0) {
    return absl::InvalidArgumentError("max_split_inputs must be >= 0");
  }
  // Pipelining needs device-side event waits on every backend.
  bool events = backends.size() > 1;
  for (Backend* backend : backends) {
    events = events && backend->device().props().caps.events;
  }
  const int n_copies = options.n_copies > 0 ? options.n_copies : events ? 4 : 1;
  return std::unique_ptr<Scheduler>(
      new Scheduler(std::move(backends), options, n_copies));
}

Scheduler::Scheduler(std::vector<Backend*> backends, SchedulerOptions options,
                     int n_copies)
    : backends_(std::move(backends)),
      options_(options),
      cpu_(static_cast<int>(backends_.size()) - 1),
      slots_(n_copies),
      batch_timeline_(std::make_shared<TimelineSemaphore>(0)),
      trace_track_(TraceRecorder::Global().Track("sched/enqueue")) {
  // The CPU works in a device's pinned host memory when one offers it, so
  // its transfers with devices are asynchronous.
  for (int b = 0; b < cpu_; ++b) {
    Device& device = backends_[b]->device();
    BufferType* pinned = device.host_buffer_type();
    if (pinned != nullptr && pinned->is_host() &&
        backends_[cpu_]->device().SupportsBufferType(pinned)) {
      pinned_type_ = pinned;
      break;
    }
  }
  for (int b = 0; b < num_backends(); ++b) {
    buffer_types_.push_back(b == cpu_ && pinned_type_ != nullptr
                                ? pinned_type_
                                : backends_[b]->default_buffer_type());
  }
  const size_t n = backends_.size();
  stats_.copies.assign(n, std::vector<int64_t>(n, 0));
  stats_.copy_bytes.assign(n, std::vector<int64_t>(n, 0));
  stats_.compute_bytes.assign(n, 0);
  stats_.copy_buffer_bytes.assign(n, 0);
}

Scheduler::~Scheduler() {
  {
    // Under mu_: an enqueue in progress finishes first; later ones see it.
    std::lock_guard<std::mutex> lock(mu_);
    closing_.store(true, std::memory_order_release);
  }
  // Callers waiting for their turn get Cancelled (every later turn too).
  slots_.turns().Fail(absl::CancelledError("the scheduler is being destroyed"));
  // Batches in flight finish; callers waiting for their slot then see
  // closing_ and return Cancelled.
  (void)Synchronize();
  std::unique_lock<std::mutex> lock(callers_mu_);
  callers_cv_.wait(lock, [this] { return callers_ == 0; });
}

absl::Status Scheduler::EnqueueSplitInputs(CapturedBatch& batch, int s,
                                           int slot) {
  TraceRecorder& trace = TraceRecorder::Global();
  const bool tracing = trace.enabled();
  const Split& split = partition_.splits[s];
  Backend& dst = lanes_.compute(split.lane);
  Backend& via =
      lanes_.copy(split.lane) != nullptr ? *lanes_.copy(split.lane) : dst;
  std::vector<Backend*> sources;  // Producers' streams.
  bool queued = false;
  for (int k = split.inputs_begin; k < split.inputs_end; ++k) {
    const int index = partition_.split_inputs[k];
    const InputCopy& input = partition_.copies[index];
    const Tensor& source = *signature_.tensor(input.source);
    Tensor& copy = *slots_.copy(index, slot);
    const int64_t begin_ns = tracing ? TraceRecorder::NowNanos() : 0;
    if (input.user_input) {
      // From the bytes captured at submission (a view reads its part).
      const Tensor& leaf =
          *signature_.tensor(signature_.wiring(input.source).owner);
      const CapturedBatch::Input* captured = batch.Find(&leaf);
      if (captured == nullptr) {
        return absl::InternalError(
            absl::StrCat("input '", leaf.name, "' was not captured"));
      }
      const size_t offset =
          captured->offset + static_cast<size_t>(source.view_offset);
      const size_t bytes = static_cast<size_t>(source.NumBytes());
      if (void* staging = slots_.staging(index, slot); staging != nullptr) {
        std::memcpy(staging, batch.bytes.data() + offset, bytes);
        FERRY_RETURN_IF_ERROR(via.EnqueueSetTensor(copy, staging, 0, bytes),
                              "uploading input '", leaf.name, "'");
        queued = true;
      } else {
        // A host copy slot, free since the slot's last batch is done.
        FERRY_RETURN_IF_ERROR(
            SetTensorData(copy, batch.bytes.data() + offset, 0, bytes),
            "writing input '", leaf.name, "'");
      }
    } else {
      // A source no split computes (a weight) waits for no producer: host
      // memory is read by the copy stream itself, device memory by its
      // backend.
      const bool host_source =
          source.buffer == nullptr || source.buffer->is_host();
      Backend& src = input.src_lane >= 0 ? lanes_.compute(input.src_lane)
                     : host_source       ? via
                                         : *backends_[input.src_backend];
      absl::Status status = via.EnqueueCopyTensor(src, source, copy);
      queued = true;
      if (absl::IsUnimplemented(status)) {
        // No async path between these two: the host copies.
        FERRY_RETURN_IF_ERROR(src.Synchronize());
        status = CopyTensor(source, copy);
      } else if (input.src_lane >= 0 &&
                 std::find(sources.begin(), sources.end(), &src) ==
                     sources.end()) {
        sources.push_back(&src);
      }
      FERRY_RETURN_IF_ERROR(status, "copying '", source.name, "' from ",
                            backends_[input.src_backend]->name());
    }
    if (tracing) {
      trace.Record(
          trace_track_,
          absl::StrCat("copy ", source.name, " ",
                       backends_[input.src_backend]->name(), "->", dst.name()),
          begin_ns, TraceRecorder::NowNanos(),
          {{"bytes", source.NumBytes()},
           {"split", static_cast<int64_t>(s)},
           {"slot", slot}});
    }
  }
  if (queued && (&via != &dst || !sources.empty())) {
    // The split computes after its copies, and the producers must not
    // overwrite what the copies read before they have run (ggml's missing
    // event sync, #8685).
    const Event copied = via.Record();
    if (&via != &dst) FERRY_RETURN_IF_ERROR(dst.EnqueueWait(copied));
    for (Backend* producer : sources) {
      FERRY_RETURN_IF_ERROR(producer->EnqueueWait(copied));
    }
  }
  return absl::OkStatus();
}

absl::Status Scheduler::EnqueueOutputs(CapturedBatch& batch, int slot) {
  // Device-resident outputs go through pinned staging (asynchronous);
  // host-resident ones straight into the caller's memory on the stream of
  // the backend that computed them.
  size_t staged_bytes = 0;
  auto on_host = [](const Tensor& t) {
    return t.buffer == nullptr || t.buffer->is_host();
  };
  for (const BatchIo::Output& out : batch.outputs) {
    if (!on_host(*out.tensor)) staged_bytes += (out.size + 63) / 64 * 64;
  }
  char* staging = nullptr;
  if (staged_bytes > 0) {
    BufferType* type = pinned_type_ != nullptr
                           ? pinned_type_
                           : backends_[cpu_]->default_buffer_type();
    FERRY_ASSIGN_OR_RETURN(staging,
                           slots_.OutputStaging(slot, staged_bytes, type));
  }
  for (const BatchIo::Output& out : batch.outputs) {
    Backend& backend = OutputStream(*out.tensor);
    if (on_host(*out.tensor)) {
      FERRY_RETURN_IF_ERROR(
          backend.EnqueueGetTensor(*out.tensor, out.data, 0, out.size),
          "downloading output '", out.tensor->name, "'");
      continue;
    }
    FERRY_RETURN_IF_ERROR(
        backend.EnqueueGetTensor(*out.tensor, staging, 0, out.size),
        "downloading output '", out.tensor->name, "'");
    batch.staged.push_back({staging, out.data, out.size});
    staging += (out.size + 63) / 64 * 64;
  }
  return absl::OkStatus();
}

Backend& Scheduler::OutputStream(const Tensor& output) {
  // The stream of the lane that computed it (its download is then ordered
  // after it and before that lane's next batch), else its backend.
  const int32_t owner = signature_.wiring(signature_.IndexOf(&output)).owner;
  if (static_cast<size_t>(owner) < partition_.node_lane.size() &&
      partition_.node_lane[owner] >= 0) {
    return lanes_.compute(partition_.node_lane[owner]);
  }
  return *backends_[partition_.backend[owner]];
}

absl::StatusOr<Event> Scheduler::EnqueueBatch(CapturedBatch& batch, int slot) {
  if (IsDeviceThread()) {
    // Never: continuations are resumed on executors, never device threads.
    return absl::InternalError(
        "scheduler: a batch enqueued on a device thread");
  }
  // Host-side spans (track "sched/enqueue"): the time each split-input copy
  // and each split's compute take to enqueue.
  TraceRecorder& trace = TraceRecorder::Global();
  const bool tracing = trace.enabled();
  const int64_t number = next_batch_;
  std::vector<Backend*> used;
  auto use = [&](Backend* stream) {
    if (std::find(used.begin(), used.end(), stream) == used.end()) {
      used.push_back(stream);
    }
  };
  std::vector<std::pair<std::string, Event>> events;
  for (int s = 0; s < num_splits(); ++s) {
    const Split& split = partition_.splits[s];
    Backend& dst = lanes_.compute(split.lane);
    use(&dst);
    FERRY_RETURN_IF_ERROR(EnqueueSplitInputs(batch, s, slot), "batch ", number,
                          ": split ", s, " on ", dst.name());
    const int64_t begin_ns = tracing ? TraceRecorder::NowNanos() : 0;
    FERRY_RETURN_IF_ERROR(dst.EnqueueCompute(slot_nodes_.nodes(s, slot)),
                          "batch ", number, ": split ", s, " on ", dst.name());
    events.emplace_back(absl::StrCat("split ", s, " on ", dst.name()),
                        dst.Record());
    if (tracing) {
      trace.Record(
          trace_track_, absl::StrCat("split ", s, " ", dst.name()), begin_ns,
          TraceRecorder::NowNanos(),
          {{"nodes", static_cast<int64_t>(slot_nodes_.nodes(s, slot).size())},
           {"split", static_cast<int64_t>(s)},
           {"slot", slot}});
    }
  }
  FERRY_RETURN_IF_ERROR(EnqueueOutputs(batch, slot), "batch ", number);
  // Every stream's last work (outputs included); copy streams' work is
  // awaited by the lanes that use it.
  for (const BatchIo::Output& out : batch.outputs) {
    use(&OutputStream(*out.tensor));
  }
  for (Backend* stream : used) {
    events.emplace_back(absl::StrCat("outputs on ", stream->name()),
                        stream->Record());
  }
  in_flight_ = true;
  const uint64_t value = static_cast<uint64_t>(++next_batch_);
  ++stats_.batches;
  std::vector<std::pair<const char*, std::pair<void*, size_t>>> staged;
  for (const CapturedBatch::Staged& s : batch.staged) {
    staged.push_back({s.from, {s.to, s.size}});
  }
  Event done(batch_timeline_, value);
  Detach(FinishBatch(std::move(events), std::move(staged), batch_timeline_,
                     value));
  // The slot (copies, staging, output staging) is free once the batch is
  // done, outputs copied out included.
  slots_.set_slot_free(slot, done);
  return done;
}

absl::StatusOr<std::unique_ptr<CapturedBatch>> Scheduler::Capture(
    const Graph& graph, const BatchIo& io) {
  // Against a plan placing the graph's tensors meanwhile.
  std::lock_guard<std::mutex> lock(mu_);
  return CaptureBatch(graph, io);
}

absl::StatusOr<Event> Scheduler::Submit(const Graph& graph, const BatchIo& io) {
  CallerGuard caller(*this);
  FERRY_RETURN_IF_ERROR(caller.Open());
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CapturedBatch> batch,
                         Capture(graph, io));
  TurnGuard turn(slots_);
  FERRY_RETURN_IF_ERROR(turn.WaitBlocking());
  const int slot = turn.slot();
  // A failed batch already reported its error; the slot is free either way.
  (void)slots_.slot_free(slot).WaitBlocking();
  std::lock_guard<std::mutex> lock(mu_);
  FERRY_RETURN_IF_ERROR(caller.Open());
  if (!IsCurrent(graph)) {
    FERRY_RETURN_IF_ERROR(AllocGraph(graph));
  }
  return EnqueueBatchOrSettle(*batch, slot);
}

absl::StatusOr<Event> Scheduler::EnqueueBatchOrSettle(CapturedBatch& batch,
                                                      int slot) {
  absl::StatusOr<Event> done = EnqueueBatch(batch, slot);
  if (!done.ok()) {
    // Part of the batch may be queued and still read the slot: let it run
    // out before anything reuses the slot (errors were rare work anyway).
    (void)Synchronize();
  }
  return done;
}

Task<absl::Status> Scheduler::ComputeAsync(const Graph& graph, BatchIo io) {
  absl::StatusOr<std::unique_ptr<CapturedBatch>> batch = Capture(graph, io);
  if (!batch.ok()) {
    return [](absl::Status status) -> Task<absl::Status> {
      co_return status;
    }(batch.status());
  }
  return RunBatch(&graph, *std::move(batch));
}

Task<absl::Status> Scheduler::RunBatch(const Graph* graph,
                                       std::unique_ptr<CapturedBatch> batch) {
  // First: destroyed last, after the turn is passed.
  CallerGuard caller(*this);
  FERRY_CO_RETURN_IF_ERROR(caller.Open());
  WaitOptions resume;
  resume.resume_on =
      options_.executor != nullptr ? options_.executor : &CallerExecutor();
  // The ticket is taken when the task starts, so batches enqueue in the
  // order their tasks start, one at a time.
  TurnGuard turn(slots_);
  FERRY_CO_RETURN_IF_ERROR(co_await turn.Wait(resume));
  turn.Hold();
  FERRY_CO_RETURN_IF_ERROR(caller.Open());
  if (!IsCurrent(*graph)) {
    absl::StatusOr<bool> holds;
    {
      std::lock_guard<std::mutex> lock(mu_);
      holds = Describe(*graph);
    }
    FERRY_CO_RETURN_IF_ERROR(holds.status());
    if (!*holds && in_flight_) {
      // A new plan needs every batch done: await them here rather than
      // block in Replan's Synchronize.
      for (int s = 0; s < slots_.n_copies(); ++s) {
        (void)co_await slots_.slot_free(s).Wait(resume);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_CO_RETURN_IF_ERROR(caller.Open());
    absl::Status planned = Adopt(*graph, *holds);
    if (planned.ok()) planned = Allocate(*graph);
    FERRY_CO_RETURN_IF_ERROR(planned);
  }
  const int slot = turn.slot();
  (void)co_await slots_.slot_free(slot).Wait(resume);
  absl::StatusOr<Event> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status open = caller.Open();
    done = open.ok() ? EnqueueBatchOrSettle(*batch, slot)
                     : absl::StatusOr<Event>(open);
  }
  turn.Pass();
  FERRY_CO_RETURN_IF_ERROR(done.status());
  co_return co_await done->Wait(resume);
}

absl::Status Scheduler::Compute(const Graph& graph, const BatchIo& io) {
  if (eval_callback_) return ComputeWithCallback(graph, io);
  FERRY_ASSIGN_OR_RETURN(Event done, Submit(graph, io));
  return done.WaitBlocking();
}

absl::Status Scheduler::ComputeWithCallback(const Graph& graph,
                                            const BatchIo& io) {
  CallerGuard caller(*this);
  FERRY_RETURN_IF_ERROR(caller.Open());
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CapturedBatch> batch,
                         Capture(graph, io));
  TurnGuard turn(slots_);
  FERRY_RETURN_IF_ERROR(turn.WaitBlocking());
  std::lock_guard<std::mutex> lock(mu_);
  FERRY_RETURN_IF_ERROR(caller.Open());
  if (!IsCurrent(graph)) FERRY_RETURN_IF_ERROR(AllocGraph(graph));
  FERRY_RETURN_IF_ERROR(Synchronize());
  const int slot = turn.slot();
  for (int s = 0; s < num_splits(); ++s) {
    const Split& split = partition_.splits[s];
    Backend& dst = lanes_.compute(split.lane);
    // Inputs: everything before this split is done, so copies are direct.
    FERRY_RETURN_IF_ERROR(EnqueueSplitInputs(*batch, s, slot), "split ", s,
                          " on ", dst.name());
    FERRY_RETURN_IF_ERROR(dst.Synchronize(), "split ", s, " on ", dst.name());
    // Nodes between observed ones run as one batch.
    const NodeSpan nodes = slot_nodes_.nodes(s, slot);
    size_t begin = 0;
    for (size_t k = 0; k < nodes.size(); ++k) {
      Tensor& original = *signature_.tensor(nodes[k]->scratch_index);
      if (!eval_callback_(original, /*ask=*/true) && k + 1 != nodes.size()) {
        continue;
      }
      FERRY_RETURN_IF_ERROR(
          dst.EnqueueCompute(NodeSpan(nodes.data() + begin, k + 1 - begin)),
          "split ", s, " on ", dst.name());
      FERRY_RETURN_IF_ERROR(dst.Synchronize(), "split ", s, " on ", dst.name());
      begin = k + 1;
      if (eval_callback_(original, /*ask=*/true) &&
          !eval_callback_(original, /*ask=*/false)) {
        return absl::CancelledError(
            absl::StrCat("evaluation callback stopped the graph after '",
                         original.name, "'"));
      }
    }
  }
  for (const BatchIo::Output& out : batch->outputs) {
    FERRY_RETURN_IF_ERROR(GetTensorData(*out.tensor, out.data, 0, out.size),
                          "reading output '", out.tensor->name, "'");
  }
  ++stats_.batches;
  return absl::OkStatus();
}

absl::Status Scheduler::Synchronize() {
  absl::Status first = lanes_.Synchronize();
  for (Backend* backend : backends_) {
    absl::Status status = backend->Synchronize();
    if (first.ok()) first = status;
  }
  // Batches' outputs are copied out after their events: wait for that too.
  (void)batch_timeline_->WaitBlocking(static_cast<uint64_t>(next_batch_));
  if (!batch_timeline_->status().ok()) {
    // Start a fresh batch timeline so the scheduler works again.
    batch_timeline_ =
        std::make_shared<TimelineSemaphore>(static_cast<uint64_t>(next_batch_));
  }
  slots_.ResetSlots();
  in_flight_ = false;
  return first;
}

void Scheduler::Reset() {
  pins_.clear();
  graph_ = nullptr;
  allocated_ = false;
  registrations_.Clear();
  stats_.registered_host_buffers = 0;
  reregister_ = true;  // The plan stays; its registrations are redone.
}

}  // namespace ferry
