#include "ferry/backends/sim/internal/sim_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "ferry/runtime/trace.h"

namespace ferry {
namespace sim_internal {
namespace {

int64_t WallForModel(int64_t model_ns, double time_scale) {
  return ClockOriginNanos() + static_cast<int64_t>(std::llround(
                                  static_cast<double>(model_ns) * time_scale));
}

}  // namespace

int64_t ClockOriginNanos() {
  static const int64_t origin = TraceRecorder::NowNanos();
  return origin;
}

int64_t ModelNowNanos(double time_scale) {
  const int64_t origin = ClockOriginNanos();
  return static_cast<int64_t>(
      static_cast<double>(TraceRecorder::NowNanos() - origin) / time_scale);
}

EventTimes& EventTimes::Global() {
  static EventTimes* const times = new EventTimes();
  return *times;
}

void EventTimes::Note(const std::shared_ptr<TimelineSemaphore>& timeline,
                      uint64_t value, int64_t model_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(timeline.get());
  if (it == entries_.end() || it->second.timeline.lock() != timeline) {
    // A new timeline (or a new one at a dead one's address): forget the
    // timelines that no longer exist.
    absl::erase_if(entries_,
                   [](const auto& kv) { return kv.second.timeline.expired(); });
    it = entries_.insert_or_assign(timeline.get(), Entry{timeline, {}, -1})
             .first;
  }
  Entry& entry = it->second;
  entry.times.emplace_back(value, model_ns);
  if (entry.times.size() > kMaxTimes) {
    entry.pruned = entry.times.front().second;
    entry.times.pop_front();
  }
}

std::optional<int64_t> EventTimes::Lookup(const Event& event) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(event.timeline().get());
  if (it == entries_.end() || it->second.timeline.lock() != event.timeline()) {
    return std::nullopt;
  }
  const Entry& entry = it->second;
  // The latest value at or below the event's.
  auto after = std::upper_bound(
      entry.times.begin(), entry.times.end(), event.value(),
      [](uint64_t value, const auto& item) { return value < item.first; });
  if (after != entry.times.begin()) return std::prev(after)->second;
  if (entry.pruned >= 0) return entry.pruned;
  return std::nullopt;
}

SimEngine::SimEngine(std::string name, double time_scale, bool in_order)
    : time_scale_(time_scale),
      in_order_(in_order),
      track_(TraceRecorder::Global().Track(name)),
      stream_(std::move(name)) {
  ClockOriginNanos();  // Fixes the origin no later than the first engine.
}

Event SimEngine::Enqueue(std::vector<Event> waits, Body body, Done done) {
  // A complete event completed by the model before now: no constraint.
  std::erase_if(waits, [](const Event& e) { return e.IsComplete(); });
  const int64_t submit_ns = ModelNowNanos(time_scale_);
  return stream_.Enqueue([this, submit_ns, waits = std::move(waits),
                          body = std::move(body),
                          done = std::move(done)]() mutable {
    Run(submit_ns, waits, std::move(body), std::move(done));
    return absl::OkStatus();
  });
}

void SimEngine::Run(int64_t submit_ns, const std::vector<Event>& waits,
                    Body body, Done done) {
  int64_t start = in_order_ ? std::max(submit_ns, cursor_ns_) : submit_ns;
  absl::Status status;
  for (const Event& event : waits) {
    status = event.WaitBlocking();
    if (!status.ok()) break;
    std::optional<int64_t> complete = EventTimes::Global().Lookup(event);
    start = std::max(start, complete ? *complete : ModelNowNanos(time_scale_));
  }

  std::vector<SimWork> work;
  const int64_t real_begin = TraceRecorder::NowNanos();
  if (status.ok() && body) status = std::move(body)(work);
  if (!status.ok()) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.failed_ops;
    }
    std::move(done)(std::move(status), start);
    return;
  }
  const int64_t real_ns = TraceRecorder::NowNanos() - real_begin;

  const int64_t origin = ClockOriginNanos();
  TraceRecorder& trace = TraceRecorder::Global();
  int64_t end = start;
  int64_t bytes = 0, flops = 0;
  for (const SimWork& item : work) {
    trace.Record(track_, item.name, origin + end,
                 origin + end + item.duration_ns,
                 {{"bytes", item.bytes}, {"flops", item.flops}});
    end += item.duration_ns;
    bytes += item.bytes;
    flops += item.flops;
  }
  cursor_ns_ = end;
  const int64_t slip = std::max<int64_t>(
      0, static_cast<int64_t>(static_cast<double>(real_ns) / time_scale_) -
             (end - start));

  // Complete at the modelled time, not before.
  const int64_t deadline = WallForModel(end, time_scale_);
  if (TraceRecorder::NowNanos() < deadline) {
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
        std::chrono::nanoseconds(deadline)));
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (!work.empty()) ++stats_.ops;
    stats_.spans += static_cast<int64_t>(work.size());
    stats_.bytes += bytes;
    stats_.flops += flops;
    stats_.busy_ns += end - start;
    stats_.clock_ns = end;
    if (slip > 0) {
      stats_.slip_ns += slip;
      ++stats_.slipped_ops;
    }
  }
  std::move(done)(absl::OkStatus(), end);
}

SimEngineStats SimEngine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void SimEngine::ResetStats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = SimEngineStats();
}

}  // namespace sim_internal
}  // namespace ferry
