// The modelled clock and the engines of a simulated device.
//
// Every engine keeps a modelled time cursor. An operation starts at the
// latest of: the engine's cursor, the modelled time the host submitted it,
// and the modelled completion of the events it waits for; it lasts the sum
// of its work items' modelled durations. Its worker does the real work, then
// sleeps until the wall-clock point of the modelled completion (wall =
// origin + model * time_scale) before completing the event, so the modelled
// clock, not the host's speed, decides when work completes and in what
// order. Each engine is a Stream (in order, one worker); an operation's
// failure goes to its completion callback, never to the engine, so one
// stream's fault does not stop other streams' work on the same engine.
//
// Modelled completion times are kept per (timeline, value) in a process-wide
// table, so an engine waiting on another sim engine's event (of any device)
// starts at that event's modelled time. Events of other backends have none;
// their modelled time is the moment the wait observes them complete.
#ifndef FERRY_BACKENDS_SIM_INTERNAL_SIM_ENGINE_H_
#define FERRY_BACKENDS_SIM_INTERNAL_SIM_ENGINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "ferry/backends/event.h"
#include "ferry/backends/sim/sim_stats.h"
#include "ferry/backends/stream.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry {
namespace sim_internal {

// Steady-clock nanoseconds at the modelled clock's origin (first use in the
// process); shared by every simulated device.
int64_t ClockOriginNanos();
// The modelled time now, for a device running at `time_scale`.
int64_t ModelNowNanos(double time_scale);

// Modelled completion times of sim engines' events. Thread-safe.
class EventTimes {
 public:
  static EventTimes& Global();

  // Records that `timeline` reached `value` at modelled time `model_ns`.
  // Values must rise per timeline.
  void Note(const std::shared_ptr<TimelineSemaphore>& timeline, uint64_t value,
            int64_t model_ns);
  // The modelled time at which `event` completed, if a sim engine recorded
  // it (an upper bound for events older than the table keeps).
  std::optional<int64_t> Lookup(const Event& event) const;

 private:
  struct Entry {
    std::weak_ptr<TimelineSemaphore> timeline;
    std::deque<std::pair<uint64_t, int64_t>> times;  // (value, model ns).
    int64_t pruned = -1;  // Latest time dropped from `times`.
  };
  static constexpr size_t kMaxTimes = 1 << 16;

  mutable std::mutex mu_;
  absl::flat_hash_map<const TimelineSemaphore*, Entry> entries_
      ABSL_GUARDED_BY(mu_);
};

// A piece of an operation's modelled work: one kernel or one copy, traced as
// one span.
struct SimWork {
  std::string name;
  int64_t duration_ns = 0;
  int64_t bytes = 0;
  int64_t flops = 0;
};

// One engine: an in-order worker with a modelled clock, stats and a trace
// track. Thread-safe.
class SimEngine {
 public:
  // Does an operation's real work and appends its modelled work items.
  using Body = absl::AnyInvocable<absl::Status(std::vector<SimWork>& work) &&>;
  // Called on the worker when the operation completes at modelled time
  // `end_ns`, or fails (a failed wait or body) with `status`.
  using Done = absl::AnyInvocable<void(absl::Status status, int64_t end_ns) &&>;

  // `name` ("sim0/h2d") names the stream and the trace track. An engine
  // that is not `in_order` in the model (the one that runs only waits)
  // starts each operation at its submission and dependencies alone, as if
  // every operation had its own queue; real completion is still in order.
  SimEngine(std::string name, double time_scale, bool in_order = true);
  SimEngine(const SimEngine&) = delete;
  SimEngine& operator=(const SimEngine&) = delete;

  const std::string& name() const { return stream_.name(); }

  // Queues `body` (may be null: a pure wait) to run after `waits` complete
  // and after everything queued before it, then `done`. Returns an event
  // that completes after `done` returns (and never fails).
  Event Enqueue(std::vector<Event> waits, Body body, Done done);
  // Blocks until everything queued so far has run.
  void Synchronize() { (void)stream_.Synchronize(); }

  SimEngineStats stats() const;
  void ResetStats();

 private:
  void Run(int64_t submit_ns, const std::vector<Event>& waits, Body body,
           Done done);

  const double time_scale_;
  const bool in_order_;
  const int track_;
  // Worker-only: the modelled completion of the latest operation.
  int64_t cursor_ns_ = 0;
  mutable std::mutex stats_mu_;
  SimEngineStats stats_ ABSL_GUARDED_BY(stats_mu_);
  Stream stream_;  // Last: its worker stops before the rest is destroyed.
};

}  // namespace sim_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_SIM_INTERNAL_SIM_ENGINE_H_
