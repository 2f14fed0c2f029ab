#include "ferry/backends/remote/transport/ucx_loop.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ferry::remote {

absl::Status UcxStatus(ucs_status_t status, absl::string_view what) {
  if (status == UCS_OK) return absl::OkStatus();
  const std::string message =
      absl::StrCat(what, ": UCX: ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_EXCEEDS_LIMIT:
      return absl::ResourceExhaustedError(message);
    case UCS_ERR_INVALID_PARAM:
      return absl::InvalidArgumentError(message);
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return absl::DeadlineExceededError(message);
    default:
      return absl::UnavailableError(message);
  }
}

void LoopExecutor::Post(std::coroutine_handle<> handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (loop_ != nullptr) loop_->PostHandle(handle);
  // Otherwise the loop is gone: the waiter is never resumed (its frame is
  // leaked rather than run against freed state).
}

absl::StatusOr<std::unique_ptr<UcxLoop>> UcxLoop::Create(
    bool cross_memory_attach) {
  std::unique_ptr<UcxLoop> loop(new UcxLoop());
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return UcxStatus(status, "ucp_config_read");
  // Endpoints that report a failed peer may only move rendezvous data over
  // transports whose memory domain can invalidate registrations (so that
  // a peer declared failed cannot still touch a request's memory). Cross
  // memory attach, UCX's zero-copy path between processes on one host,
  // registers nothing and does not claim it unless told to; so between a
  // client and a worker on one host all bytes went over TCP at half the
  // bandwidth. Claiming it is safe here: the rendezvous reads the
  // sender's memory (UCX's get scheme, never a write into a buffer), and
  // a process that may cross-memory-attach to another may ptrace it. The
  // environment's UCX_CMA_MEMORY_INVALIDATE, if set, still decides. (UCX
  // hands the key to each memory domain's table without its prefix; in
  // 1.13 only cma's has it.) Not claiming it keeps cma off these
  // endpoints.
  if (!cross_memory_attach ||
      std::getenv("UCX_CMA_MEMORY_INVALIDATE") == nullptr) {
    status = ucp_config_modify(config, "MEMORY_INVALIDATE",
                               cross_memory_attach ? "y" : "n");
    if (status != UCS_OK) {
      ucp_config_release(config);
      return UcxStatus(status, "ucp_config_modify");
    }
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  status = ucp_init(&params, config, &loop->context_);
  ucp_config_release(config);
  if (status != UCS_OK) return UcxStatus(status, "ucp_init");
  ucp_worker_params_t wparams = {};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(loop->context_, &wparams, &loop->worker_);
  if (status != UCS_OK) return UcxStatus(status, "ucp_worker_create");
  status = ucp_worker_get_efd(loop->worker_, &loop->efd_);
  if (status != UCS_OK) return UcxStatus(status, "ucp_worker_get_efd");
  // The loop's thread sleeps on an epoll set holding the worker's fd, so
  // that a thread driving the loop can take the fd out of it (Drive).
  loop->loop_epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (loop->loop_epfd_ < 0) {
    return absl::InternalError(
        absl::StrCat("epoll_create1: ", std::strerror(errno)));
  }
  epoll_event ev = {};
  ev.events = EPOLLIN;
  if (epoll_ctl(loop->loop_epfd_, EPOLL_CTL_ADD, loop->efd_, &ev) != 0) {
    return absl::InternalError(
        absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  loop->executor_ = std::make_shared<LoopExecutor>();
  {
    std::lock_guard<std::mutex> lock(loop->executor_->mu_);
    loop->executor_->loop_ = loop.get();
  }
  return loop;
}

struct UcxLoop::SendContext {
  UcxLoop* loop;
  std::string header;
  UcxLoop::Done done;
};

UcxLoop::~UcxLoop() {
  Stop();
  if (thread_.joinable()) thread_.join();
  if (executor_ != nullptr) {
    std::lock_guard<std::mutex> lock(executor_->mu_);
    executor_->loop_ = nullptr;
  }
  if (loop_epfd_ >= 0) close(loop_epfd_);
  // Work never run may hold what needs UCX to let go (a buffer's memory
  // registration): drop it while UCX is still there, as Shutdown does.
  std::deque<absl::AnyInvocable<void() &&>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    dropped.swap(posted_);
  }
  dropped.clear();
  deferred_.clear();
  CloseUcx();
}

void UcxLoop::CloseUcx() {
  if (worker_ != nullptr) {
    // A send whose endpoint was force-closed mid-rendezvous finishes only
    // when the worker runs the slow-path callback UCX queued for it: give
    // such sends a bounded chance, telling nobody (no one waits now).
    for (SendContext* ctx : sends_in_flight_) ctx->done = nullptr;
    const absl::Time deadline = absl::Now() + absl::Milliseconds(200);
    while (!sends_in_flight_.empty() && absl::Now() < deadline) {
      ucp_worker_progress(worker_);
    }
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
  }
  if (context_ != nullptr) {
    if (sends_in_flight_.empty()) {
      ucp_cleanup(context_);
    } else {
      // Still unfinished, they hold registered memory, and UCX 1.13's
      // ucp_cleanup aborts on it ("destroying inuse region"): the context
      // is kept, reachable, for the rest of the process instead.
      static auto* kept = new std::vector<ucp_context_h>;
      static absl::Mutex kept_mu;
      absl::MutexLock lock(&kept_mu);
      kept->push_back(context_);
    }
    context_ = nullptr;
  }
  // UCX will not touch these sends' headers again; their callbacks never
  // came, so nobody waits for `done` any more.
  for (SendContext* ctx : sends_in_flight_) delete ctx;
  sends_in_flight_.clear();
}

void UcxLoop::Post(absl::AnyInvocable<void() &&> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (shut_down_) {
    lock.unlock();  // `fn`'s captures may post as they go.
    return;
  }
  posted_.push_back(std::move(fn));
  // Under mu_: Shutdown cannot destroy the worker meanwhile.
  if (!InLoop()) ucp_worker_signal(worker_);
}

void UcxLoop::Shutdown() {
  // exit() called while this thread runs the loop (its own thread, or one
  // driving it): UCX is in use below this frame, and the thread cannot wait
  // for itself. Left as it is.
  if (InLoop() || thread_.get_id() == std::this_thread::get_id()) return;
  Join();
  std::lock_guard<std::mutex> held(hold_mu_);  // No thread drives it now.
  std::deque<absl::AnyInvocable<void() &&>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    dropped.swap(posted_);
  }
  dropped.clear();
  deferred_.clear();
  CloseUcx();
}

void UcxLoop::RunOrPost(absl::AnyInvocable<void() &&> fn) {
  // Inside loop work, running `fn` now would reenter UCX: queue it.
  if (!InLoop() && !stop_.load()) {
    std::unique_lock<std::mutex> held(hold_mu_, std::try_to_lock);
    // Stopped meanwhile: Shutdown may have closed UCX before this lock.
    if (held.owns_lock() && !stop_.load()) {
      loop_thread_.store(std::this_thread::get_id());
      {
        DeviceThreadScope device_thread;
        RunPosted();  // What was posted before `fn` runs first.
        std::move(fn)();
        RunUntilIdle();
      }
      Release(held);
      return;
    }
  }
  Post(std::move(fn));
}

bool UcxLoop::Drive(absl::FunctionRef<bool()> done, absl::Duration budget) {
  if (done()) return true;
  if (budget <= absl::ZeroDuration() || InLoop() || stop_.load()) return false;
  std::unique_lock<std::mutex> held(hold_mu_, std::try_to_lock);
  if (!held.owns_lock() || stop_.load()) return false;
  loop_thread_.store(std::this_thread::get_id());
  // The loop's thread sleeps on: traffic no longer wakes it.
  (void)epoll_ctl(loop_epfd_, EPOLL_CTL_DEL, efd_, nullptr);
  const auto until =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(budget);
  bool finished = false;
  {
    DeviceThreadScope device_thread;
    while (true) {
      RunUntilIdle();
      if ((finished = done())) break;
      if (std::chrono::steady_clock::now() >= until) break;
    }
  }
  Release(held);
  return finished;
}

void UcxLoop::RunUntilIdle() {
  bool active = true;
  while (active) {
    active = RunPosted();
    while (ucp_worker_progress(worker_) != 0) active = true;
  }
}

void UcxLoop::Release(std::unique_lock<std::mutex>& held) {
  // Leave the worker armed with nothing pending, so that the loop's thread
  // wakes only for new traffic.
  while (true) {
    RunUntilIdle();
    if (ucp_worker_arm(worker_) != UCS_ERR_BUSY) break;
  }
  bool left = pending_requests_ > 0 || !deferred_.empty();
  {
    std::lock_guard<std::mutex> lock(mu_);
    left |= !posted_.empty();
  }
  loop_thread_.store(std::thread::id());
  epoll_event ev = {};
  ev.events = EPOLLIN;
  (void)epoll_ctl(loop_epfd_, EPOLL_CTL_ADD, efd_, &ev);
  held.unlock();
  // Work that still needs progress: the loop's thread takes it over.
  if (left) ucp_worker_signal(worker_);
}

void UcxLoop::PostHandle(std::coroutine_handle<> handle) {
  Post([handle] { Resume(handle); });
}

void UcxLoop::Defer(absl::AnyInvocable<void() &&> fn) {
  deferred_.push_back(std::move(fn));
}

void UcxLoop::SetTick(absl::Duration period, absl::AnyInvocable<void()> fn) {
  tick_period_ = period;
  tick_ = std::move(fn);
}

void UcxLoop::Start(std::string name) {
  thread_ = std::thread([this, name = std::move(name)] {
    (void)name;
    DeviceThreadScope device_thread;
    Run();
  });
}

void UcxLoop::Join() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void UcxLoop::Stop() {
  stop_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  if (!shut_down_ && worker_ != nullptr) ucp_worker_signal(worker_);
}

absl::Status UcxLoop::SetAmHandler(unsigned id, ucp_am_recv_callback_t cb,
                                   void* arg) {
  ucp_am_handler_param_t param = {};
  param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                     UCP_AM_HANDLER_PARAM_FIELD_CB |
                     UCP_AM_HANDLER_PARAM_FIELD_ARG;
  param.id = id;
  param.cb = cb;
  param.arg = arg;
  return UcxStatus(ucp_worker_set_am_recv_handler(worker_, &param),
                   "AM handler");
}

bool UcxLoop::RunPosted() {
  std::deque<absl::AnyInvocable<void() &&>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(posted_);
  }
  bool any = !batch.empty();
  for (auto& fn : batch) std::move(fn)();
  while (!deferred_.empty()) {
    any = true;
    auto fn = std::move(deferred_.front());
    deferred_.pop_front();
    std::move(fn)();
  }
  return any;
}

void UcxLoop::Run() {
  std::unique_lock<std::mutex> held(hold_mu_);
  loop_thread_.store(std::this_thread::get_id());
  using Clock = std::chrono::steady_clock;
  const auto kSpin = absl::ToChronoNanoseconds(idle_spin_);
  auto last_activity = Clock::now();
  auto next_tick = Clock::now();
  const auto tick_period = absl::ToChronoNanoseconds(tick_period_);
  while (!stop_.load(std::memory_order_relaxed)) {
    if (tick_ != nullptr && Clock::now() >= next_tick) {
      next_tick = Clock::now() + tick_period;
      tick_();
    }
    bool active = RunPosted();
    while (ucp_worker_progress(worker_) != 0) active = true;
    active |= RunPosted();
    if (active) {
      last_activity = Clock::now();
      continue;
    }
    if (Clock::now() - last_activity < kSpin) continue;
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!posted_.empty()) continue;
    }
    // Asleep, the loop may be held by a thread waiting for a reply.
    loop_thread_.store(std::thread::id());
    held.unlock();
    epoll_event ev;
    (void)epoll_wait(loop_epfd_, &ev, 1, /*timeout_ms=*/20);
    held.lock();
    loop_thread_.store(std::this_thread::get_id());
    last_activity = Clock::now() - kSpin / 2;
  }
  RunPosted();
  loop_thread_.store(std::thread::id());
}

namespace {}  // namespace

void UcxLoop::SendCallback(void* request, ucs_status_t status,
                           void* user_data) {
  auto* ctx = static_cast<SendContext*>(user_data);
  --ctx->loop->pending_requests_;
  ctx->loop->sends_in_flight_.erase(ctx);
  if (ctx->done != nullptr) {
    std::move(ctx->done)(UcxStatus(status, "active message send"));
  }
  delete ctx;
  ucp_request_free(request);
}

struct UcxLoop::RecvContext {
  UcxLoop* loop;
  UcxLoop::Done done;
};

void UcxLoop::RecvCallback(void* request, ucs_status_t status, size_t,
                           void* user_data) {
  auto* ctx = static_cast<RecvContext*>(user_data);
  --ctx->loop->pending_requests_;
  std::move(ctx->done)(UcxStatus(status, "active message receive"));
  delete ctx;
  ucp_request_free(request);
}

namespace {

// Fires a callback when an event completes (a detached coroutine).
struct Detached {
  struct promise_type {
    Detached get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

Detached WhenComplete(Event event, std::shared_ptr<LoopExecutor> executor,
                      UcxLoop::Done fn) {
  WaitOptions options;
  options.resume_on = executor.get();
  absl::Status status = co_await event.Wait(std::move(options));
  std::move(fn)(std::move(status));
}

}  // namespace

void UcxLoop::SendAm(ucp_ep_h ep, unsigned id, std::string header,
                     const void* data, size_t size, Done done,
                     bool force_rndv) {
  auto* ctx = new SendContext{this, std::move(header), std::move(done)};
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_REPLY |
                (size >= kRndvThreshold || (force_rndv && size > 0)
                     ? UCP_AM_SEND_FLAG_RNDV
                     : 0);
  param.cb.send = SendCallback;
  param.user_data = ctx;
  ucs_status_ptr_t request = ucp_am_send_nbx(
      ep, id, ctx->header.data(), ctx->header.size(), data, size, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    const absl::Status status =
        request == nullptr
            ? absl::OkStatus()
            : UcxStatus(UCS_PTR_STATUS(request), "active message send");
    if (ctx->done != nullptr) {
      Defer([done = std::move(ctx->done), status]() mutable {
        std::move(done)(status);
      });
    }
    delete ctx;
    return;
  }
  ++pending_requests_;  // SendCallback ends it.
  sends_in_flight_.insert(ctx);
}

std::string UcxLoop::EndpointTransports(ucp_ep_h ep) {
  // UCX 1.13 has no query for an endpoint's transports, only a printout:
  // a line per lane, "lane[0]:  1:tcp/lo.0 md[1] -> ...".
  char* text = nullptr;
  size_t length = 0;
  FILE* stream = open_memstream(&text, &length);
  if (stream == nullptr) return "";
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  std::set<std::string> names;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(text, length), '\n')) {
    const size_t lane = line.find("lane[");
    if (lane == absl::string_view::npos) continue;
    const size_t colon = line.find("]:", lane);
    if (colon == absl::string_view::npos) continue;
    absl::string_view rest =
        absl::StripLeadingAsciiWhitespace(line.substr(colon + 2));
    const size_t index_end = rest.find(':');
    const size_t device = rest.find('/');
    if (index_end == absl::string_view::npos ||
        device == absl::string_view::npos || device <= index_end + 1) {
      continue;
    }
    names.insert(
        std::string(rest.substr(index_end + 1, device - index_end - 1)));
  }
  std::free(text);
  return absl::StrJoin(names, ",");
}

bool UcxLoop::UsesCrossMemoryAttach(absl::string_view transports) {
  for (absl::string_view name : absl::StrSplit(transports, ',')) {
    if (name == "cma") return true;
  }
  return false;
}

void UcxLoop::RecvAmData(void* desc, void* dst, size_t size, Done done) {
  auto* ctx = new RecvContext{this, std::move(done)};
  ucp_request_param_t param = {};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = RecvCallback;
  param.user_data = ctx;
  ucs_status_ptr_t request =
      ucp_am_recv_data_nbx(worker_, desc, dst, size, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    const absl::Status status =
        request == nullptr
            ? absl::OkStatus()
            : UcxStatus(UCS_PTR_STATUS(request), "active message receive");
    Defer([done = std::move(ctx->done), status]() mutable {
      std::move(done)(status);
    });
    delete ctx;
    return;
  }
  ++pending_requests_;  // RecvCallback ends it.
}

void UcxLoop::OnEvent(const Event& event, Done fn) {
  if (event.IsComplete()) {
    Defer([fn = std::move(fn)]() mutable { std::move(fn)(absl::OkStatus()); });
    return;
  }
  WhenComplete(event, executor_, std::move(fn));
}

}  // namespace ferry::remote
