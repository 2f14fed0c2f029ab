// DefaultExecutor: where continuations resume when nobody said where.
//
// Awaiting a device event from a coroutine must never continue on the
// device's own thread (a blocking call there could stall the device's
// completions). An awaitable given no executor therefore resumes its waiter
// on CallerExecutor(): the executor the awaiting thread was running for
// (Executor::Current(): a pool worker's pool, a SyncWait's run loop), or,
// from a plain or device thread, the process's DefaultExecutor().
#ifndef FERRY_RUNTIME_DEFAULT_EXECUTOR_H_
#define FERRY_RUNTIME_DEFAULT_EXECUTOR_H_

#include "ferry/runtime/executor.h"

namespace ferry {

// A process-wide thread pool of a few workers, started on first use and
// never destroyed (continuations may be posted to it until the process
// exits). Thread-safe.
Executor& DefaultExecutor();

// Executor::Current() when the calling thread has one, else
// DefaultExecutor(). Thread-safe.
inline Executor& CallerExecutor() {
  Executor* current = Executor::Current();
  return current != nullptr ? *current : DefaultExecutor();
}

}  // namespace ferry

#endif  // FERRY_RUNTIME_DEFAULT_EXECUTOR_H_
