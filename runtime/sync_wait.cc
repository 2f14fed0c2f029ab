#include "ferry/runtime/sync_wait.h"

#include <thread>
#include <vector>

#include "ferry/runtime/default_executor.h"

namespace ferry {
namespace runtime_internal {
namespace {

// Loops of exited threads, for new threads to take (see ThreadRunLoop).
std::mutex free_loops_mu;
std::vector<ThreadRunLoop*>& FreeLoops() {
  static auto* const loops = new std::vector<ThreadRunLoop*>();
  return *loops;
}

// Every loop ever made, so that they stay reachable (not leaks).
std::vector<ThreadRunLoop*>& AllLoops() {
  static auto* const loops = new std::vector<ThreadRunLoop*>();
  return *loops;
}

// Holds the thread's loop and gives it back when the thread exits.
struct LoopHolder {
  ThreadRunLoop* loop = nullptr;
  ~LoopHolder() {
    if (loop == nullptr) return;
    std::lock_guard<std::mutex> lock(free_loops_mu);
    FreeLoops().push_back(loop);
  }
};

// Idle rounds before the waiting thread sleeps: a continuation that comes
// back within microseconds (a hop onto a pool and back) is caught without
// a futex sleep and wake.
constexpr int kSpinsBeforeSleep = 200;

}  // namespace

ThreadRunLoop& ThreadRunLoop::ForThisThread() {
  thread_local LoopHolder holder;
  if (holder.loop == nullptr) {
    std::lock_guard<std::mutex> lock(free_loops_mu);
    if (!FreeLoops().empty()) {
      holder.loop = FreeLoops().back();
      FreeLoops().pop_back();
    } else {
      holder.loop = new ThreadRunLoop();
      AllLoops().push_back(holder.loop);
    }
  }
  return *holder.loop;
}

void ThreadRunLoop::Post(std::coroutine_handle<> handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_ > 0) {
      queue_.push_back(handle);
      cv_.notify_one();
      return;
    }
  }
  DefaultExecutor().Post(handle);
}

void ThreadRunLoop::SetDone(bool& done) {
  // The waiter may return as soon as it sees `done`: nothing is touched
  // after the unlock but this immortal loop.
  std::lock_guard<std::mutex> lock(mu_);
  done = true;
  cv_.notify_all();
}

void ThreadRunLoop::RunUntilDone(const bool& done) {
  ScopedCurrentExecutor current(IsDeviceThread() ? nullptr : this);
  std::unique_lock<std::mutex> lock(mu_);
  ++active_;
  int spins = 0;
  for (;;) {
    if (!queue_.empty()) {
      std::coroutine_handle<> next = queue_.front();
      queue_.pop_front();
      lock.unlock();
      Resume(next);
      spins = 0;
      lock.lock();
      continue;
    }
    if (done) break;
    if (++spins < kSpinsBeforeSleep) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    cv_.wait(lock, [&] { return done || !queue_.empty(); });
  }
  --active_;
  std::deque<std::coroutine_handle<>> left;
  if (active_ == 0) left.swap(queue_);
  lock.unlock();
  for (std::coroutine_handle<> handle : left) DefaultExecutor().Post(handle);
}

}  // namespace runtime_internal
}  // namespace ferry
