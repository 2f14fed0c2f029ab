// WorkerServer: the worker's start (options and quotas checked, the
// listener), its housekeeping tick (silent clients, mute connections, late
// peers, expired transfers) and its shutdown. The rest of WorkerServer::Impl
// lives in the files its header (internal/worker_impl.h) lists.
#include "ferry/backends/remote/worker/worker_server.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/transport/address.h"
#include "ferry/backends/remote/transport/ucx_loop.h"
#include "ferry/backends/remote/worker/blocking_pool.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::Peer;
using ::ferry::remote::worker_internal::SessionPtr;

namespace {

constexpr size_t kMinTokenBytes = 16;

}  // namespace

WorkerServer::Impl::~Impl() {
  if (listener_ != nullptr) ucp_listener_destroy(listener_);
}

absl::Status WorkerServer::Impl::Start() {
  if (options_.devices.empty()) {
    return absl::InvalidArgumentError("a worker serves at least one device");
  }
  if (options_.token.size() < kMinTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a worker needs a token of ", kMinTokenBytes,
        " bytes at least (--token_file, or FERRY_WORKER_TOKEN); this one has ",
        options_.token.size()));
  }
  WorkerQuotas& q = options_.quotas;
  if (q.max_sessions < 1 || q.max_pending_connections < 1 ||
      q.hello_timeout <= absl::ZeroDuration() || q.max_session_buffers < 1 ||
      q.max_session_streams < 1 || q.max_worker_streams < 1 ||
      q.max_session_threads < 1 || q.max_worker_threads < 1 ||
      q.max_session_transfers < 1) {
    return absl::InvalidArgumentError("a worker quota is under 1");
  }
  uint64_t memory = 0;
  for (Device* d : options_.devices) memory += d->props().memory_total;
  if (memory == 0) memory = ~uint64_t{0};
  if (q.max_worker_bytes == 0) q.max_worker_bytes = memory;
  if (q.max_session_bytes == 0) q.max_session_bytes = q.max_worker_bytes;
  // A restarted worker binds its port at once, though connections of the
  // one before linger in TIME_WAIT (a port some process listens on stays
  // refused). The environment, if set, still decides.
  setenv("UCX_TCP_CM_REUSEADDR", "y", /*overwrite=*/0);
  if (options_.idle_spin < absl::ZeroDuration() ||
      options_.idle_spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("idle spin ", absl::FormatDuration(options_.idle_spin),
                     " is outside [0, 1s]"));
  }
  if (options_.client_timeout < absl::Seconds(2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "client timeout ", absl::FormatDuration(options_.client_timeout),
        " is under 2s (clients ping every second)"));
  }
  FERRY_ASSIGN_OR_RETURN(loop_, UcxLoop::Create());
  FERRY_ASSIGN_OR_RETURN(pool_,
                         BlockingPool::Create(options_.blocking_threads,
                                              options_.max_queued_loads));
  for (unsigned id : {kAmCommand, kAmPeer}) {
    FERRY_RETURN_IF_ERROR(loop_->SetAmHandler(id, OnCommand, this));
  }
  FERRY_RETURN_IF_ERROR(loop_->SetAmHandler(kAmReply, OnReply, this));
  FERRY_ASSIGN_OR_RETURN(sockaddr_storage addr,
                         ResolveAddress(options_.host, options_.port));
  ucp_listener_params_t params = {};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  params.sockaddr.addrlen = sizeof(addr);
  params.conn_handler.cb = OnConnection;
  params.conn_handler.arg = this;
  FERRY_RETURN_IF_ERROR(UcxStatus(
      ucp_listener_create(loop_->worker(), &params, &listener_),
      absl::StrCat("listening on ", options_.host, ":", options_.port)));
  ucp_listener_attr_t attr = {};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  FERRY_RETURN_IF_ERROR(
      UcxStatus(ucp_listener_query(listener_, &attr), "ucp_listener_query"));
  port_ = SockaddrPort(attr.sockaddr);
  loop_->SetTick(absl::Milliseconds(200), [this] { Tick(); });
  loop_->SetIdleSpin(options_.idle_spin);
  return absl::OkStatus();
}

void WorkerServer::Impl::Tick() {
  const absl::Time now = absl::Now();
  // A client pings at least every second; one silent this long is gone
  // even if its connection stays open (a hung process). Not while this
  // loop itself was held up: what clients sent may still be queued.
  const bool loop_was_stalled = now - last_tick_ > absl::Seconds(1);
  last_tick_ = now;
  std::vector<SessionPtr> silent;
  for (auto& [id, s] : by_id_) {
    if (loop_was_stalled) s->last_heard = now;
    if (s->role == Role::kClient && !s->closed &&
        now - s->last_heard > options_.client_timeout) {
      silent.push_back(s);
    }
  }
  for (const SessionPtr& s : silent) {
    CloseSession(s, absl::StrCat("client silent for ",
                                 absl::FormatDuration(now - s->last_heard)));
  }
  // Connections that never said hello, and peers that never answered.
  std::vector<ucp_ep_h> mute;
  for (auto& [ep, pending] : pending_eps_) {
    if (now - pending.since > options_.quotas.hello_timeout) {
      mute.push_back(ep);
    }
  }
  for (ucp_ep_h ep : mute) {
    pending_eps_.erase(ep);
    ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FORCE);
  }
  std::vector<std::shared_ptr<Peer>> late;
  for (auto& [address, peer] : peers_) {
    if (!peer->ready && now > peer->deadline) late.push_back(peer);
  }
  for (const std::shared_ptr<Peer>& peer : late) {
    FailPeer(peer,
             absl::DeadlineExceededError(absl::StrCat(
                 "no answer to hello in ",
                 absl::FormatDuration(options_.quotas.peer_connect_timeout))));
  }
  for (auto& [id, s] : by_id_) {
    std::vector<uint64_t> expired;
    for (auto& [tid, t] : s->transfers) {
      if (!t->arrived && now > t->deadline) expired.push_back(tid);
    }
    for (uint64_t tid : expired) {
      auto t = s->transfers[tid];
      s->transfers.erase(tid);
      Drop(t->data);
      t->gate->Fail(absl::DeadlineExceededError(
          absl::StrCat("transfer ", tid, ": no bytes from the peer worker in ",
                       absl::FormatDuration(options_.transfer_timeout))));
    }
  }
}

void WorkerServer::Impl::Shutdown() {
  std::vector<SessionPtr> sessions;
  for (auto& [id, s] : by_id_) sessions.push_back(s);
  for (const SessionPtr& s : sessions) {
    CloseSession(s, "worker stopping", /*close_ep=*/false);
  }
  // Let the streams drain and the releases run.
  for (int i = 0; i < 1000; ++i) {
    while (ucp_worker_progress(loop_->worker()) != 0) {
    }
    loop_->Post([] {});
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (i > 10) break;
  }
}

WorkerServer::WorkerServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
WorkerServer::~WorkerServer() = default;

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Create(
    WorkerOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  FERRY_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<WorkerServer>(new WorkerServer(std::move(impl)));
}

int WorkerServer::port() const { return impl_->port(); }
void WorkerServer::Run() { impl_->Run(); }
void WorkerServer::Stop() { impl_->Stop(); }

}  // namespace ferry::remote
