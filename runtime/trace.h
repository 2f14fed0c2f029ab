// Trace spans: a cheap recorder of (track, name, begin, end, args), written
// out as Chrome trace JSON (opens in Perfetto and chrome://tracing).
//
// Tracks are named lanes ("sim0/compute", "sim0/h2d", "disk"). Begin and end
// are nanoseconds on whatever clock the producer uses (steady clock for host
// work, the modelled clock for a simulated device), so a span can be recorded
// after the fact. While recording is off, Record() costs one relaxed load.
#ifndef FERRY_RUNTIME_TRACE_H_
#define FERRY_RUNTIME_TRACE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ferry {

// A numeric span argument; `key` must be a string literal (not copied).
struct TraceArg {
  const char* key = nullptr;
  int64_t value = 0;
};

struct TraceSpan {
  int track = 0;
  std::string name;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  std::array<TraceArg, 4> args{};
};

// Thread-safe.
class TraceRecorder {
 public:
  TraceRecorder() = default;
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // The process-wide recorder that ferry's components write to.
  static TraceRecorder& Global();

  void SetEnabled(bool enabled) {
    enabled_.store(enabled, std::memory_order_relaxed);
  }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // Returns the id of the track called `name`, creating it if needed.
  int Track(absl::string_view name);

  // Records a span if recording is on. Up to four args are kept.
  void Record(int track, absl::string_view name, int64_t begin_ns,
              int64_t end_ns, std::initializer_list<TraceArg> args = {});
  // Adds a span recorded elsewhere (another process's, already on this
  // recorder's clock), whether or not recording is on now.
  void Insert(int track, absl::string_view name, int64_t begin_ns,
              int64_t end_ns, std::initializer_list<TraceArg> args = {});

  // Returns every span recorded so far, sorted by begin time.
  std::vector<TraceSpan> Spans() const;
  std::vector<std::string> TrackNames() const;
  void Clear();

  // Renders the spans as Chrome trace JSON ("X" events, one tid per track).
  std::string ToChromeTraceJson() const;
  absl::Status WriteChromeTrace(const std::string& path) const;

  // Nanoseconds on the steady clock, the default time base for host spans.
  static int64_t NowNanos();

 private:
  struct ThreadBuffer {
    std::mutex mu;
    std::vector<TraceSpan> spans ABSL_GUARDED_BY(mu);
  };
  ThreadBuffer& LocalBuffer();

  static inline std::atomic<uint64_t> next_id_{1};
  const uint64_t id_ = next_id_.fetch_add(1);
  std::atomic<bool> enabled_{false};
  mutable std::mutex mu_;
  std::vector<std::string> tracks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<ThreadBuffer>> buffers_ ABSL_GUARDED_BY(mu_);
};

// Records the span of a scope on the global recorder.
class ScopedTraceSpan {
 public:
  ScopedTraceSpan(int track, absl::string_view name)
      : track_(track),
        name_(name),
        begin_ns_(TraceRecorder::Global().enabled() ? TraceRecorder::NowNanos()
                                                    : -1) {}
  ~ScopedTraceSpan() {
    if (begin_ns_ >= 0) {
      TraceRecorder::Global().Record(track_, name_, begin_ns_,
                                     TraceRecorder::NowNanos());
    }
  }
  ScopedTraceSpan(const ScopedTraceSpan&) = delete;
  ScopedTraceSpan& operator=(const ScopedTraceSpan&) = delete;

 private:
  int track_;
  absl::string_view name_;
  int64_t begin_ns_;
};

}  // namespace ferry

#endif  // FERRY_RUNTIME_TRACE_H_
