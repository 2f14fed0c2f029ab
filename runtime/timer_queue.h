// TimerQueue: runs callbacks at deadlines on one background thread.
//
// Deadline waits (TimelineSemaphore::Wait with a deadline) are built on it.
// Cancel() guarantees that, once it returns, the callback is not running and
// will not run, so a callback may refer to memory its canceller frees next.
#ifndef FERRY_RUNTIME_TIMER_QUEUE_H_
#define FERRY_RUNTIME_TIMER_QUEUE_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"

namespace ferry {

// Thread-safe.
class TimerQueue {
 public:
  using TimerId = uint64_t;

  TimerQueue();
  // Drops timers that have not fired, then joins the thread.
  ~TimerQueue();

  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // The process-wide queue, started on first use.
  static TimerQueue& Default();

  // Runs `callback` on the timer thread at or after `deadline`.
  TimerId Schedule(absl::Time deadline, absl::AnyInvocable<void() &&> callback);

  // Returns true if the timer was removed before it ran. Either way, once
  // this returns the callback is not running (unless called from it).
  bool Cancel(TimerId id);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  // Ordered by (deadline, id) so equal deadlines fire in scheduling order.
  std::map<std::pair<absl::Time, TimerId>, absl::AnyInvocable<void() &&>>
      timers_ ABSL_GUARDED_BY(mu_);
  std::map<TimerId, absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  TimerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  TimerId running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ferry

#endif  // FERRY_RUNTIME_TIMER_QUEUE_H_
