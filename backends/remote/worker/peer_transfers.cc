// WorkerServer::Impl's peer transfers: connections to other workers (only
// those --peers allows, names resolved off the loop), kSendToPeer,
// kRecvFromPeer, kCancelTransfer, and the bytes a peer delivers (kPeerData,
// checked against the receiving session's capability), possibly before the
// receive that waits for them.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/transport/address.h"
#include "ferry/backends/remote/worker/internal/buffer_checks.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::BufferRec;
using ::ferry::remote::worker_internal::EarlyPeerData;
using ::ferry::remote::worker_internal::Incoming;
using ::ferry::remote::worker_internal::Peer;
using ::ferry::remote::worker_internal::RefuseWeights;
using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;
using ::ferry::remote::worker_internal::StreamRec;
using ::ferry::remote::worker_internal::TransferRec;

namespace {

constexpr size_t kMaxEarlyPeerData = 1024;

}  // namespace

absl::Status WorkerServer::Impl::CancelTransfer(const SessionPtr& sp,
                                                const Message& m) {
  absl::Status status = m.status();
  if (status.ok()) {
    return absl::InvalidArgumentError("cancel_transfer with an OK status");
  }
  // The receive came first (the client sends both on this session, in
  // order): a transfer not found is done or was refused, and there is
  // nothing to fail.
  if (sp->transfers.count(m.id) == 0) return absl::OkStatus();
  Incoming none;
  TransferArrived(*sp, m.id, std::move(status), none);
  return absl::OkStatus();
}

bool WorkerServer::Impl::PeerAllowed(const std::string& address) const {
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) return false;
  for (const std::string& allowed : options_.peers) {
    if (allowed == hp->host || allowed == address) return true;
  }
  return false;
}

void WorkerServer::Impl::WithPeer(
    const std::string& address,
    absl::AnyInvocable<void(absl::Status, ucp_ep_h) &&> fn) {
  auto it = peers_.find(address);
  std::shared_ptr<Peer> peer;
  if (it != peers_.end()) {
    peer = it->second;
  } else {
    peer = std::make_shared<Peer>();
    peer->address = address;
    peer->deadline = absl::Now() + options_.quotas.peer_connect_timeout;
    peers_[address] = peer;
    absl::StatusOr<HostPort> hp = ParseHostPort(address);
    if (!hp.ok()) {
      peers_.erase(address);
      std::move(fn)(hp.status(), nullptr);
      return;
    }
    // Resolved off the loop: a slow name server must not stall it.
    UcxLoop* loop = loop_.get();
    absl::Status queued =
        pool_->Run([this, loop, peer, host = hp->host, port = hp->port] {
          absl::StatusOr<sockaddr_storage> addr = ResolveAddress(host, port);
          loop->Post([this, peer, addr = std::move(addr)]() mutable {
            ConnectPeer(peer, std::move(addr));
          });
        });
    if (!queued.ok()) {
      peers_.erase(address);
      std::move(fn)(queued, nullptr);
      return;
    }
  }
  if (peer->ready) {
    std::move(fn)(absl::OkStatus(), peer->ep);
    return;
  }
  peer->waiting.push_back([fn = std::move(fn), peer](absl::Status st) mutable {
    std::move(fn)(st, st.ok() ? peer->ep : nullptr);
  });
}

void WorkerServer::Impl::ConnectPeer(std::shared_ptr<Peer> peer,
                                     absl::StatusOr<sockaddr_storage> addr) {
  auto it = peers_.find(peer->address);
  if (it == peers_.end() || it->second != peer) return;  // Failed already.
  if (!addr.ok()) {
    FailPeer(peer, addr.status());
    return;
  }
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&*addr);
  params.sockaddr.addrlen = sizeof(*addr);
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = OnEndpointError;
  params.err_handler.arg = this;
  ucs_status_t st = ucp_ep_create(loop_->worker(), &params, &peer->ep);
  if (st != UCS_OK) {
    peer->ep = nullptr;
    FailPeer(peer,
             UcxStatus(st, absl::StrCat("connecting to peer ", peer->address)));
    return;
  }
  peer_by_ep_[peer->ep] = peer;
  Message hello;
  hello.kind = static_cast<uint8_t>(Cmd::kHello);
  hello.value = kProtocolVersion;
  hello.byte = static_cast<uint8_t>(Role::kPeer);
  hello.text = options_.token;
  loop_->SendAm(peer->ep, kAmPeer, EncodeCommand(hello), nullptr, 0);
}

void WorkerServer::Impl::FailPeer(const std::shared_ptr<Peer>& p,
                                  absl::Status status) {
  p->failed = absl::Status(
      status.code(),
      absl::StrCat("peer worker ", p->address, ": ", status.message()));
  p->ready = false;
  auto it = peers_.find(p->address);
  if (it != peers_.end() && it->second == p) peers_.erase(it);
  if (p->ep != nullptr) {
    peer_by_ep_.erase(p->ep);
    ucp_ep_h ep = p->ep;
    p->ep = nullptr;
    loop_->Defer([ep] { ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FORCE); });
  }
  while (!p->waiting.empty()) {
    auto fn = std::move(p->waiting.front());
    p->waiting.pop_front();
    std::move(fn)(p->failed);
  }
}

ucs_status_t WorkerServer::Impl::OnReply(void* arg, const void* header,
                                         size_t header_length, void*, size_t,
                                         const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) return UCS_OK;
  absl::StatusOr<Message> m = DecodeReply(
      absl::string_view(static_cast<const char*>(header), header_length));
  if (m.ok()) self->PeerReply(param->reply_ep, *m);
  return UCS_OK;
}

void WorkerServer::Impl::PeerReply(ucp_ep_h ep, const Message& m) {
  auto it = peer_by_ep_.find(ep);
  if (it == peer_by_ep_.end()) return;
  std::shared_ptr<Peer> peer = it->second;
  if (m.reply() != ReplyKind::kHello) return;  // Peers get no other replies.
  absl::Status st = m.status();
  const bool users_differ_on_cma =
      st.ok() && m.id != geteuid() &&
      UcxLoop::UsesCrossMemoryAttach(UcxLoop::EndpointTransports(ep));
  if (users_differ_on_cma) {
    // Unlike a client, a worker cannot connect again without cma: its one
    // UCX context serves every client and peer.
    st = absl::FailedPreconditionError(absl::StrCat(
        "it runs as user ", m.id, " and this worker as user ", geteuid(),
        " on one host, where UCX moves bytes by cross-memory attach, which "
        "needs one user: run the workers as one user, or all with "
        "UCX_CMA_MEMORY_INVALIDATE=n"));
  }
  if (st.ok()) {
    peer->ready = true;
  } else {
    peer->failed = absl::Status(
        st.code(),
        absl::StrCat("peer worker ", peer->address, ": ", st.message()));
    peers_.erase(peer->address);
    peer_by_ep_.erase(ep);
    // The peer accepted the hello: this side hangs up.
    if (users_differ_on_cma) {
      loop_->Defer([ep] { ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FORCE); });
    }
  }
  while (!peer->waiting.empty()) {
    auto fn = std::move(peer->waiting.front());
    peer->waiting.pop_front();
    std::move(fn)(st.ok() ? absl::OkStatus() : peer->failed);
  }
}

absl::Status WorkerServer::Impl::SendToPeer(const SessionPtr& sp,
                                            const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> b, FindRange(s, m));
  FERRY_RETURN_IF_ERROR(ParseHostPort(m.text).status());
  if (!PeerAllowed(m.text)) {
    // The token goes only where the operator said peers are.
    return absl::PermissionDeniedError(
        absl::StrCat("peer ", m.text, " is not in this worker's --peers"));
  }
  if (b->device != stream->device) {
    return absl::InvalidArgumentError("buffer is not on the stream's device");
  }
  FERRY_RETURN_IF_ERROR(RefuseWeights(*b, "send_to_peer"));
  const void* src = nullptr;
  std::shared_ptr<Buffer> staging;
  std::shared_ptr<TimelineSemaphore> gate;
  std::vector<Event> produced;
  if (b->is_host()) {
    src = b->host(m.offset);
    produced = Point(*stream);
    gate = Gate(*stream);  // Not overwritten before it is sent.
  } else {
    FERRY_ASSIGN_OR_RETURN(staging, Staging(stream->device, m.size));
    Flush(*stream);
    FERRY_RETURN_IF_ERROR(stream->backend->EnqueueGetTensor(
        b->whole, staging->base(), m.offset, m.size));
    src = staging->base();
    produced = Point(*stream);
  }
  Message header;
  header.kind = static_cast<uint8_t>(Cmd::kPeerData);
  header.value = m.value;
  header.id = m.id;
  header.cap = m.cap;
  std::string address = m.text;
  const uint64_t size = m.size;
  std::weak_ptr<Session> weak = sp;
  const uint64_t stream_id = m.stream, transfer = m.id;
  AfterAll(std::move(produced), [this, address, header, src, size, staging,
                                 gate, b, weak, stream_id,
                                 transfer](absl::Status st) mutable {
    auto finish = [this, gate, staging, b, weak, stream_id,
                   transfer](absl::Status st) mutable {
      staging.reset();
      // Sent, or not: then the client tells the receiver, whose stream
      // would otherwise wait out its timeout. Until this the client
      // watches the send (the stream may be past it: bytes out of device
      // memory go from staging).
      SessionPtr s = weak.lock();
      if (s != nullptr && !s->closed) {
        Message r;
        r.kind = static_cast<uint8_t>(ReplyKind::kTransferEnded);
        r.stream = stream_id;
        r.id = transfer;
        r.set_status(st);
        Reply(s, std::move(r));
      }
      if (gate == nullptr) return;
      if (st.ok()) {
        (void)gate->Signal(1);
      } else {
        gate->Fail(st);
      }
    };
    if (!st.ok()) {
      // Tell the receiver, so its stream fails rather than waits.
      header.set_status(st);
    }
    WithPeer(
        address, [this, header, src, size, weak, finish = std::move(finish)](
                     absl::Status st, ucp_ep_h ep) mutable {
          if (!st.ok()) {
            finish(st);
            return;
          }
          const bool ok = header.code == 0;
          if (ok) {
            stats_.peer_bytes_out += size;
            if (SessionPtr s = weak.lock()) s->stats.peer_bytes_out += size;
          }
          loop_->SendAm(ep, kAmPeer, EncodeCommand(header), ok ? src : nullptr,
                        ok ? size : 0, std::move(finish));
        });
  });
  return absl::OkStatus();
}

absl::Status WorkerServer::Impl::RecvFromPeer(const SessionPtr& sp,
                                              const Message& m) {
  Session& s = *sp;
  FERRY_ASSIGN_OR_RETURN(StreamRec * stream, FindStream(s, m.stream));
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<BufferRec> b, FindRange(s, m));
  if (b->device != stream->device) {
    return absl::InvalidArgumentError("buffer is not on the stream's device");
  }
  FERRY_RETURN_IF_ERROR(RefuseWeights(*b, "recv_from_peer"));
  if (s.transfers.count(m.id) > 0 ||
      s.transfers.size() >=
          static_cast<size_t>(options_.quotas.max_session_transfers)) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer ", m.id, " is in use (or too many)"));
  }
  auto t = std::make_shared<TransferRec>();
  t->buffer = b;
  t->size = m.size;
  t->stream = m.stream;
  t->deadline = absl::Now() + options_.transfer_timeout;
  const uint64_t session = s.id, transfer = m.id;
  if (b->is_host()) {
    // Straight into the buffer, once the stream is past the work before.
    t->dst = b->host(m.offset);
    std::vector<Event> before = Point(*stream);
    t->gate = Gate(*stream);
    AfterAll(std::move(before), [this, session, transfer](absl::Status st) {
      auto it = by_id_.find(session);
      if (it == by_id_.end()) return;
      auto found = it->second->transfers.find(transfer);
      if (found == it->second->transfers.end()) return;
      if (!st.ok()) {
        found->second->gate->Fail(st);
        Drop(found->second->data);
        it->second->transfers.erase(found);
        return;
      }
      found->second->ready = true;
      TryCompleteTransfer(session, transfer);
    });
  } else {
    // Device memory: into private staging at once; the upload follows the
    // gate in the stream's order.
    FERRY_ASSIGN_OR_RETURN(t->staging, Staging(stream->device, m.size));
    t->dst = static_cast<char*>(t->staging->base());
    t->ready = true;
    t->gate = GateNow(*stream);
    FERRY_RETURN_IF_ERROR(stream->backend->EnqueueSetTensor(
        b->whole, t->staging->base(), m.offset, m.size));
    std::shared_ptr<Buffer> staging = t->staging;
    AfterAll(Point(*stream),
             [staging](absl::Status) mutable { staging.reset(); });
  }
  s.transfers[transfer] = t;
  // Bytes that came before this command.
  auto early = s.early_peer_data.find(transfer);
  if (early != s.early_peer_data.end()) {
    t->arrived = true;
    t->peer_status = early->second.status;
    t->data = std::move(early->second.data);
    s.early_peer_data.erase(early);
  }
  TryCompleteTransfer(session, transfer);
  return absl::OkStatus();
}

void WorkerServer::Impl::PeerData(const SessionPtr& from, const Message& m,
                                  Incoming& in) {
  auto it = by_id_.find(m.value);
  if (it == by_id_.end() || it->second->role != Role::kClient) {
    Drop(in);
    return;  // The session ended: nothing waits for these bytes.
  }
  if (!SameCapability(m.cap, it->second->cap)) {
    // Not sent for this session: the sender guessed, or is not the worker
    // the session's client named. It is cut off, and nothing of the
    // session is touched.
    Drop(in);
    std::fprintf(stderr,
                 "ferry_worker: peer session %llu sent bytes for session "
                 "%llu without its capability: disconnected\n",
                 static_cast<unsigned long long>(from->id),
                 static_cast<unsigned long long>(m.value));
    CloseSession(from, "peer data without the receiver's capability");
    return;
  }
  absl::Status status = m.status();
  if (status.ok()) {
    stats_.peer_bytes_in += in.length;
    it->second->stats.peer_bytes_in += in.length;
  }
  TransferArrived(*it->second, m.id, std::move(status), in);
}

void WorkerServer::Impl::TransferArrived(Session& s, uint64_t transfer,
                                         absl::Status status, Incoming& in) {
  auto t = s.transfers.find(transfer);
  if (t == s.transfers.end()) {
    if (s.early_peer_data.size() >= kMaxEarlyPeerData ||
        s.early_peer_data.count(transfer) > 0) {
      Drop(in);
      return;
    }
    s.early_peer_data[transfer] = EarlyPeerData{status, std::move(in)};
    in = Incoming();
    return;
  }
  if (t->second->arrived) {
    Drop(in);
    return;
  }
  t->second->arrived = true;
  t->second->peer_status = status;
  t->second->data = std::move(in);
  in = Incoming();
  TryCompleteTransfer(s.id, transfer);
}

void WorkerServer::Impl::TryCompleteTransfer(uint64_t session,
                                             uint64_t transfer) {
  auto it = by_id_.find(session);
  if (it == by_id_.end()) return;
  Session& s = *it->second;
  auto found = s.transfers.find(transfer);
  if (found == s.transfers.end()) return;
  std::shared_ptr<TransferRec> t = found->second;
  if (!t->ready || !t->arrived) return;
  s.transfers.erase(found);
  if (!t->peer_status.ok()) {
    Drop(t->data);
    t->gate->Fail(t->peer_status);
    return;
  }
  if (t->data.length != t->size) {
    Drop(t->data);
    t->gate->Fail(absl::InvalidArgumentError(
        absl::StrCat("transfer ", transfer, ": ", t->data.length,
                     " bytes from the peer, ", t->size, " expected")));
    return;
  }
  Deliver(std::move(t->data), t->dst, [t](absl::Status st) {
    if (st.ok()) {
      (void)t->gate->Signal(1);
    } else {
      t->gate->Fail(st);
    }
  });
}

}  // namespace ferry::remote
