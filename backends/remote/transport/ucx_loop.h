// UcxLoop: one UCX context and worker, driven by one thread.
//
// Every UCX call of a client connection or of a ferry worker happens in the
// loop (the worker is single-threaded, as UCX is fastest): on the loop's
// thread, or on a thread that holds the loop while the loop's thread sleeps
// (RunOrPost, Drive). Other threads hand the loop work with Post(), which
// wakes it through the worker's event fd. The loop spins on
// ucp_worker_progress while there is traffic and sleeps on the event fd
// after a short idle spell (for the CPU the devices need).
//
// A thread that sends a command and then waits for its reply can do both
// itself (RunOrPost, then Drive, spinning), so that neither crosses to
// another thread: with a core to spare, the shortest round trip.
//
// It is also the Executor that local events resume on, so a device's
// completion turns into loop work (OnEvent) without a thread of its own.
#ifndef FERRY_BACKENDS_REMOTE_TRANSPORT_UCX_LOOP_H_
#define FERRY_BACKENDS_REMOTE_TRANSPORT_UCX_LOOP_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <coroutine>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ferry/backends/event.h"
#include "ferry/runtime/executor.h"

namespace ferry::remote {

// A UCX status as an absl::Status ("what: UCX message").
absl::Status UcxStatus(ucs_status_t status, absl::string_view what);

class UcxLoop;

// Resumes coroutines on a loop while it lives; drops them after (shared so
// that a wait outliving the loop never touches freed memory). Thread-safe.
class LoopExecutor final : public Executor {
 public:
  void Post(std::coroutine_handle<> handle) override;

 private:
  friend class UcxLoop;
  std::mutex mu_;
  UcxLoop* loop_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// Thread-safe: Post and Stop from any thread; everything else on the loop.
class UcxLoop {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // With `cross_memory_attach` false, bulk bytes never go by cross-memory
  // attach (which needs both processes to run as one user).
  static absl::StatusOr<std::unique_ptr<UcxLoop>> Create(
      bool cross_memory_attach = true);
  // Stops and joins the thread of Start(), then closes UCX.
  ~UcxLoop();
  // Joins the loop's thread (after what was posted runs), waits for a
  // thread driving the loop, and closes UCX now; what is posted afterwards
  // is dropped. For process exit: UCX's libraries tear down their state
  // after exit handlers, under any thread of theirs still running.
  void Shutdown();

  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  const std::shared_ptr<LoopExecutor>& executor() const { return executor_; }

  // Runs `fn` on the loop, in posting order.
  void Post(absl::AnyInvocable<void() &&> fn);
  // Runs `fn` now on the calling thread if it can hold the loop at once
  // (the loop's thread sleeps and no other thread holds it; what was
  // posted before runs first), else Post()s it. For work that only sends:
  // never call it while holding a lock that loop work takes.
  void RunOrPost(absl::AnyInvocable<void() &&> fn);
  // Holds the loop on the calling thread (not the loop's) and spins on it
  // until `done()` or for at most `budget`; returns done(). Returns false
  // at once when another thread holds the loop (the caller then waits as
  // usual, asleep).
  bool Drive(absl::FunctionRef<bool()> done, absl::Duration budget);
  // Runs the loop on a new thread, a device thread (executor.h).
  void Start(std::string name);
  // Runs the loop on the calling thread until Stop().
  void Run();
  void Stop();
  // Stops the thread of Start() and waits for it (not from the loop).
  void Join();
  // True on the thread that holds the loop now.
  bool InLoop() const {
    return std::this_thread::get_id() == loop_thread_.load();
  }

  // Loop thread only. Sends an active message; `header` is kept until the
  // send completes, `data` must stay valid until `done` runs (on the loop).
  // Payloads of kRndvThreshold bytes and more go by rendezvous, so the
  // receiver pulls them straight into their destination.
  static constexpr size_t kRndvThreshold = 16 << 10;
  // `force_rndv` sends any payload by rendezvous: the receiver reads the
  // bytes when it asks for them, not now.
  void SendAm(ucp_ep_h ep, unsigned id, std::string header, const void* data,
              size_t size, Done done = nullptr, bool force_rndv = false);
  // Loop thread only. The UCX transports `ep`'s lanes use, sorted and
  // comma-separated ("cma,tcp"), as UCX describes them; empty if it names
  // none.
  static std::string EndpointTransports(ucp_ep_h ep);
  // True if `transports` (as EndpointTransports gives them) has cma. Cross
  // memory attach needs the two processes to run as one user (the rights
  // to ptrace each other): else every copy on it fails.
  static bool UsesCrossMemoryAttach(absl::string_view transports);
  // Receives a rendezvous AM's bytes into `dst`; `done` runs on the loop.
  void RecvAmData(void* desc, void* dst, size_t size, Done done);
  // Calls `fn` on the loop once `event` completes, with its status.
  void OnEvent(const Event& event, Done fn);
  // Routes active messages with `id` to `cb(arg, ...)` on the loop (before
  // Run, or on the loop).
  absl::Status SetAmHandler(unsigned id, ucp_am_recv_callback_t cb, void* arg);
  // Runs `fn` on the loop after the current callback returns.
  void Defer(absl::AnyInvocable<void() &&> fn);
  // Runs `fn` on the loop about every `period` (set before Run).
  void SetTick(absl::Duration period, absl::AnyInvocable<void()> fn);
  // How long the loop's thread keeps polling after the last traffic before
  // it sleeps on the event fd (set before Run; 0 by default). Polling saves
  // the wake-up of a sleeping thread on the next message (on a VM, tens of
  // microseconds) at the price of a core while it lasts.
  void SetIdleSpin(absl::Duration spin) { idle_spin_ = spin; }

 private:
  // Destroys the worker and the context (the loop's thread is gone), first
  // letting sends in flight finish for a moment.
  void CloseUcx();

  friend class LoopExecutor;
  UcxLoop() = default;
  void PostHandle(std::coroutine_handle<> handle);
  // Runs posted work; true if there was any.
  bool RunPosted();
  // Progresses UCX and runs posted work until both are idle.
  void RunUntilIdle();
  // Gives the loop back after RunOrPost or Drive; wakes the loop's thread
  // if something is left for it.
  void Release(std::unique_lock<std::mutex>& held);
  struct SendContext;
  struct RecvContext;
  static void SendCallback(void* request, ucs_status_t status, void* user_data);
  static void RecvCallback(void* request, ucs_status_t status, size_t length,
                           void* user_data);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;        // The UCX worker's event fd.
  int loop_epfd_ = -1;  // What the loop's thread sleeps on: {efd_}.
  std::shared_ptr<LoopExecutor> executor_;
  std::mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> posted_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<absl::AnyInvocable<void() &&>> deferred_;  // Loop only.
  absl::AnyInvocable<void()> tick_;
  absl::Duration tick_period_ = absl::Seconds(1);
  absl::Duration idle_spin_ = absl::ZeroDuration();
  std::atomic<bool> stop_{false};
  // Held by whichever thread runs the loop: the loop's thread except while
  // it sleeps on the event fd, or a caller in RunOrPost/Drive.
  std::mutex hold_mu_;
  // The thread holding the loop (none while the loop's thread sleeps).
  std::atomic<std::thread::id> loop_thread_{};
  // UCX requests not finished (the loop's thread must progress them).
  int pending_requests_ = 0;  // Loop only.
  // Sends UCX has not completed (loop only): a send still in flight when
  // its endpoint goes away mid-rendezvous may never get its callback, so
  // the destructor frees what is left once the worker is gone.
  std::unordered_set<SendContext*> sends_in_flight_;
  std::thread thread_;
};

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_TRANSPORT_UCX_LOOP_H_
