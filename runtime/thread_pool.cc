#include "ferry/runtime/thread_pool.h"

#include <algorithm>

namespace ferry {
namespace {

// The pool and worker index of the current thread, if it is a worker.
thread_local const ThreadPool* current_pool = nullptr;
thread_local int current_worker = -1;

// Idle rounds (each a yield and a re-check for work, well under a
// microsecond) before a worker sleeps on the condition variable.
constexpr int kSpinsBeforeSleep = 256;

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int n = std::max(1, num_threads);
  workers_.reserve(n);
  for (int i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>());
  for (int i = 0; i < n; ++i) {
    workers_[i]->thread = std::thread([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  for (auto& worker : workers_) worker->thread.join();
}

bool ThreadPool::IsWorkerThread() const { return current_pool == this; }

void ThreadPool::Post(std::coroutine_handle<> handle) {
  const int n = num_threads();
  const int target =
      current_pool == this
          ? current_worker
          : static_cast<int>(
                next_worker_.fetch_add(1, std::memory_order_relaxed) % n);
  {
    Worker& worker = *workers_[target];
    std::lock_guard<std::mutex> lock(worker.mu);
    worker.queue.push_back(handle);
  }
  // Pairs with the sleeper's increment of sleeping_ then check of pending_:
  // both sides use seq_cst so at least one sees the other.
  pending_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_cv_.notify_one();
  }
}

bool ThreadPool::TryPop(int index, std::coroutine_handle<>& out) {
  Worker& worker = *workers_[index];
  std::lock_guard<std::mutex> lock(worker.mu);
  if (worker.queue.empty()) return false;
  out = worker.queue.front();
  worker.queue.pop_front();
  return true;
}

bool ThreadPool::TrySteal(int index, std::coroutine_handle<>& out) {
  const int n = num_threads();
  for (int i = 1; i < n; ++i) {
    Worker& victim = *workers_[(index + i) % n];
    std::lock_guard<std::mutex> lock(victim.mu);
    if (victim.queue.empty()) continue;
    // Steal the oldest: the owner keeps its most recent, cache-warm work.
    out = victim.queue.front();
    victim.queue.pop_front();
    return true;
  }
  return false;
}

void ThreadPool::WorkerLoop(int index) {
  ScopedCurrentExecutor current(this);
  current_pool = this;
  current_worker = index;
  int idle_spins = 0;
  for (;;) {
    std::coroutine_handle<> next;
    if (pending_.load(std::memory_order_acquire) > 0 &&
        (TryPop(index, next) || TrySteal(index, next))) {
      pending_.fetch_sub(1, std::memory_order_relaxed);
      idle_spins = 0;
      Resume(next);
      continue;
    }
    if (++idle_spins < kSpinsBeforeSleep) {
      std::this_thread::yield();
      continue;
    }
    idle_spins = 0;
    std::unique_lock<std::mutex> lock(wake_mu_);
    sleeping_.fetch_add(1, std::memory_order_seq_cst);
    wake_cv_.wait(lock, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) {
      return stopping_ || pending_.load(std::memory_order_seq_cst) > 0;
    });
    sleeping_.fetch_sub(1, std::memory_order_seq_cst);
    if (stopping_ && pending_.load(std::memory_order_seq_cst) == 0) return;
  }
}

}  // namespace ferry
