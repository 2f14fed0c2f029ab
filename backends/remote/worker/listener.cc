// WorkerServer::Impl's listener: connections (refused while an address
// backs off after wrong tokens, or too many have not said hello), endpoint
// failures, and the hello that checks the token and opens a session.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/device.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::Peer;
using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;

namespace {

constexpr int kFreeAuthFailures = 5;

}  // namespace

void WorkerServer::Impl::OnConnection(ucp_conn_request_h request, void* arg) {
  auto* self = static_cast<Impl*>(arg);
  std::string from = "unknown";
  ucp_conn_request_attr_t attr = {};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(request, &attr) == UCS_OK) {
    char host[INET6_ADDRSTRLEN] = {};
    const auto* sa = reinterpret_cast<const sockaddr*>(&attr.client_address);
    const void* raw =
        sa->sa_family == AF_INET6
            ? static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr);
    if (inet_ntop(sa->sa_family, raw, host, sizeof(host)) != nullptr) {
      from = host;
    }
  }
  const absl::Time now = absl::Now();
  auto failures = self->auth_failures_.find(from);
  const bool backing_off =
      failures != self->auth_failures_.end() && failures->second.until > now;
  if (backing_off ||
      self->pending_eps_.size() >=
          static_cast<size_t>(self->options_.quotas.max_pending_connections)) {
    // Refused before any work: too many wrong tokens from there, or too
    // many connections that have not said hello.
    (void)ucp_listener_reject(self->listener_, request);
    return;
  }
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.conn_request = request;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = OnEndpointError;
  params.err_handler.arg = self;
  ucp_ep_h ep;
  if (ucp_ep_create(self->loop_->worker(), &params, &ep) == UCS_OK) {
    self->pending_eps_[ep] = PendingEp{now, std::move(from)};
  }
}

void WorkerServer::Impl::OnEndpointError(void* arg, ucp_ep_h ep,
                                         ucs_status_t status) {
  auto* self = static_cast<Impl*>(arg);
  self->loop_->Defer([self, ep, status] {
    auto it = self->by_ep_.find(ep);
    if (it != self->by_ep_.end()) {
      SessionPtr session = it->second;
      self->CloseSession(session, absl::StrCat("connection lost (",
                                               ucs_status_string(status), ")"));
      return;
    }
    auto peer = self->peer_by_ep_.find(ep);
    if (peer != self->peer_by_ep_.end()) {
      std::shared_ptr<Peer> p = peer->second;
      self->FailPeer(p,
                     absl::UnavailableError(absl::StrCat(
                         "connection lost (", ucs_status_string(status), ")")));
      return;
    }
    if (self->pending_eps_.erase(ep) > 0) {
      ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FORCE);
    }
  });
}

void WorkerServer::Impl::Hello(ucp_ep_h ep, const Message& m) {
  Message reply;
  reply.kind = static_cast<uint8_t>(ReplyKind::kHello);
  // Constant-time comparison of the token.
  const std::string& want = options_.token;
  unsigned char diff = m.text.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < m.text.size(); ++i) {
    diff |= static_cast<unsigned char>(m.text[i]) ^
            static_cast<unsigned char>(want[i % want.size()]);
  }
  absl::Status status;
  std::string from;
  if (auto pending = pending_eps_.find(ep); pending != pending_eps_.end()) {
    from = pending->second.from;
  }
  if (diff != 0) {
    status = absl::PermissionDeniedError("wrong token");
    AuthFailed(from, "wrong token");
  } else if (by_id_.size() >=
             static_cast<size_t>(options_.quotas.max_sessions)) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("this worker serves ", options_.quotas.max_sessions,
                     " sessions already (--max_sessions)"));
  } else if (m.value != kProtocolVersion) {
    status = absl::FailedPreconditionError(
        absl::StrCat("protocol version ", m.value, " (this worker speaks ",
                     kProtocolVersion, ")"));
  } else if (m.byte != static_cast<uint8_t>(Role::kClient) &&
             m.byte != static_cast<uint8_t>(Role::kPeer)) {
    status = absl::InvalidArgumentError(absl::StrCat("role ", m.byte));
  }
  absl::StatusOr<Capability> cap =
      status.ok() ? NewCapability() : absl::StatusOr<Capability>(status);
  if (!cap.ok()) status = cap.status();
  pending_eps_.erase(ep);
  if (!status.ok()) {
    reply.set_status(status);
    loop_->SendAm(
        ep, kAmReply, EncodeReply(reply), nullptr, 0,
        [ep](absl::Status) { ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FLUSH); });
    return;
  }
  auth_failures_.erase(from);
  reply.id = geteuid();
  auto s = std::make_shared<Session>();
  s->id = next_session_++;
  s->cap = *cap;
  s->last_heard = absl::Now();
  s->role = static_cast<Role>(m.byte);
  s->ep = ep;
  by_ep_[ep] = s;
  by_id_[s->id] = s;
  ++stats_.sessions;
  std::vector<DeviceInfo> infos;
  for (Device* d : options_.devices) {
    DeviceProps props = d->props();
    DeviceInfo info;
    info.name = std::string(d->name());
    info.type = props.type;
    info.memory_free = props.memory_free;
    info.memory_total = props.memory_total;
    info.alignment = d->default_buffer_type()->alignment();
    info.max_size = d->default_buffer_type()->max_size();
    info.description = props.description;
    BufferType* weights = d->weights_buffer_type();
    if (weights != d->default_buffer_type()) {
      info.weights_type = std::string(weights->name()).substr(0, 64);
      info.weights_alignment = weights->alignment();
    }
    infos.push_back(std::move(info));
  }
  reply.value = s->id;
  reply.cap = s->cap;
  reply.blob = EncodeDeviceInfos(infos);
  loop_->SendAm(ep, kAmReply, EncodeReply(reply), nullptr, 0);
}

void WorkerServer::Impl::AuthFailed(const std::string& from,
                                    absl::string_view why) {
  if (auth_failures_.size() >= 4096) auth_failures_.clear();  // Bounded.
  AuthFailures& f = auth_failures_[from];
  ++f.count;
  if (f.count >= kFreeAuthFailures) {
    const int doublings = std::min(f.count - kFreeAuthFailures, 6);
    f.until = absl::Now() + absl::Seconds(1 << doublings);
  }
  std::fprintf(stderr,
               "ferry_worker: hello from %s refused (%.*s), %d in a row%s\n",
               from.c_str(), static_cast<int>(why.size()), why.data(), f.count,
               f.count >= kFreeAuthFailures ? ": refusing it for a while" : "");
}

}  // namespace ferry::remote
