#include "ferry/runtime/default_executor.h"

#include <algorithm>
#include <thread>

#include "ferry/runtime/thread_pool.h"

namespace ferry {

Executor& DefaultExecutor() {
  // Immortal: detached work may still post to it during exit.
  static ThreadPool* const pool = new ThreadPool(static_cast<int>(
      std::clamp(std::thread::hardware_concurrency(), 2u, 4u)));
  return *pool;
}

}  // namespace ferry
