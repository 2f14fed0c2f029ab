#include "ferry/backends/remote/worker/blocking_pool.h"

#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ferry::remote {

absl::StatusOr<std::unique_ptr<BlockingPool>> BlockingPool::Create(
    int threads, size_t max_queued) {
  if (threads < 1 || threads > 64 || max_queued < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a blocking pool of ", threads,
                     " threads (1 to 64) and a queue of ", max_queued));
  }
  std::unique_ptr<BlockingPool> pool(new BlockingPool(max_queued));
  for (int i = 0; i < threads; ++i) {
    try {
      pool->threads_.emplace_back([p = pool.get()] { p->Work(); });
    } catch (const std::system_error& e) {
      return absl::ResourceExhaustedError(
          absl::StrCat("starting a blocking-work thread: ", e.what()));
    }
  }
  return pool;
}

BlockingPool::~BlockingPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

absl::Status BlockingPool::Run(absl::AnyInvocable<void() &&> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= max_queued_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          max_queued_, " file loads and name lookups already queued"));
    }
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
  return absl::OkStatus();
}

void BlockingPool::Work() {
  while (true) {
    absl::AnyInvocable<void() &&> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(fn)();
  }
}

}  // namespace ferry::remote
