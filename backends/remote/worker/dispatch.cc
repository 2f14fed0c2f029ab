// WorkerServer::Impl's dispatch: commands from an endpoint (hello first,
// peers only with peer data), held until their turn by sequence number,
// then run by their handler (Execute); an error goes back as a result or
// fails the stream the command was for. Also the replies and the bytes an
// incoming message carries.
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/worker/internal/worker_impl.h"

namespace ferry::remote {

using ::ferry::remote::worker_internal::Held;
using ::ferry::remote::worker_internal::Incoming;
using ::ferry::remote::worker_internal::Session;
using ::ferry::remote::worker_internal::SessionPtr;

namespace {

constexpr size_t kMaxHeldCommands = 4096;

}  // namespace

ucs_status_t WorkerServer::Impl::OnCommand(void* arg, const void* header,
                                           size_t header_length, void* data,
                                           size_t length,
                                           const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) return UCS_OK;
  return self->Command(
      param->reply_ep,
      absl::string_view(static_cast<const char*>(header), header_length), data,
      length, (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
}

ucs_status_t WorkerServer::Impl::Command(ucp_ep_h ep, absl::string_view header,
                                         void* data, size_t length, bool rndv) {
  absl::StatusOr<Message> m = DecodeCommand(header);
  auto it = by_ep_.find(ep);
  if (it == by_ep_.end()) {
    // Nothing but a hello before the token is checked.
    if (m.ok() && m->cmd() == Cmd::kHello) {
      Hello(ep, *m);
    } else {
      pending_eps_.erase(ep);
      ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FORCE);
    }
    return UCS_OK;
  }
  SessionPtr s = it->second;
  if (s->closed) return UCS_OK;
  s->last_heard = absl::Now();
  Incoming in;
  in.length = length;
  ucs_status_t keep = UCS_OK;
  if (rndv) {
    in.desc = data;
    keep = UCS_INPROGRESS;
  } else if (length > 0) {
    in.bytes.assign(static_cast<const char*>(data), length);
  }
  if (!m.ok()) {
    Drop(in);
    Result(s, 0,
           absl::Status(m.status().code(), absl::StrCat("malformed command: ",
                                                        m.status().message())));
    return keep;
  }
  if (m->cmd() == Cmd::kHello) {
    Drop(in);
    Result(s, 0, absl::FailedPreconditionError("hello twice"));
    return keep;
  }
  if (s->role == Role::kPeer) {
    if (m->cmd() != Cmd::kPeerData) {
      Drop(in);
      CloseSession(s, "a peer may only send peer data");
      return keep;
    }
    PeerData(s, *m, in);
    return keep;
  }
  if (m->cmd() == Cmd::kPeerData) {
    Drop(in);
    Result(s, 0, absl::PermissionDeniedError("peer data from a client"));
    return keep;
  }
  if (m->seq != s->next_seq) {
    const uint64_t bytes = header.size() + length;
    if (m->seq < s->next_seq || s->held.size() >= kMaxHeldCommands ||
        s->held.count(m->seq) > 0 ||
        bytes > options_.quotas.max_held_bytes - s->held_bytes) {
      Drop(in);
      Result(s, 0,
             absl::InvalidArgumentError(absl::StrCat(
                 "command ", CmdName(m->cmd()), ": sequence number ", m->seq,
                 " is stale, repeated or too far ahead of ", s->next_seq,
                 " (or over the bytes held for later)")));
      return keep;
    }
    const uint64_t seq = m->seq;
    s->held_bytes += bytes;
    s->held.emplace(seq, Held{*std::move(m), std::move(in), bytes});
    return keep;
  }
  Dispatch(s, *m, in);
  // Then whatever came early and is now in order.
  while (!s->closed) {
    auto held = s->held.find(s->next_seq);
    if (held == s->held.end()) break;
    Held h = std::move(held->second);
    s->held.erase(held);
    s->held_bytes -= h.bytes;
    Dispatch(s, h.m, h.in);
  }
  return keep;
}

void WorkerServer::Impl::Dispatch(const SessionPtr& s, Message& m,
                                  Incoming& in) {
  ++s->next_seq;
  const Cmd cmd = m.cmd();
  absl::Status status = Execute(s, m, in);
  Drop(in);  // Whatever the command did not take.
  if (status.ok()) return;
  status = absl::Status(status.code(),
                        absl::StrCat(CmdName(cmd), ": ", status.message()));
  if (CommandFields(cmd) & kFReq) {
    Result(s, m.req, status);
    return;
  }
  // Stream work: the stream fails, as if the work had.
  if (CommandFields(cmd) & kFStream) {
    auto stream = s->streams.find(m.stream);
    if (stream != s->streams.end()) {
      FailStream(*stream->second, status);
      return;
    }
  }
  Result(s, 0, status);
}

void WorkerServer::Impl::Reply(const SessionPtr& s, Message reply,
                               const void* data, size_t size,
                               UcxLoop::Done done) {
  if (s->closed) {
    if (done != nullptr) {
      loop_->Defer([done = std::move(done)]() mutable {
        std::move(done)(absl::UnavailableError("session closed"));
      });
    }
    return;
  }
  loop_->SendAm(s->ep, kAmReply, EncodeReply(reply), data, size,
                std::move(done));
}

void WorkerServer::Impl::Result(const SessionPtr& s, uint64_t req,
                                const absl::Status& status, uint64_t value) {
  Message r;
  r.kind = static_cast<uint8_t>(ReplyKind::kResult);
  r.req = req;
  r.value = value;
  r.set_status(status);
  Reply(s, std::move(r));
}

void WorkerServer::Impl::Drop(Incoming& in) {
  if (in.desc != nullptr) {
    // Released after the AM callback that may still be running returns.
    ucp_worker_h worker = loop_->worker();
    void* desc = in.desc;
    loop_->Defer([worker, desc] { ucp_am_data_release(worker, desc); });
    in.desc = nullptr;
  }
  in.bytes.clear();
}

void WorkerServer::Impl::Deliver(Incoming in, void* dst, UcxLoop::Done done) {
  if (in.desc != nullptr) {
    // Outside any AM callback.
    loop_->Defer([this, desc = in.desc, dst, length = in.length,
                  done = std::move(done)]() mutable {
      loop_->RecvAmData(desc, dst, length, std::move(done));
    });
    return;
  }
  if (!in.bytes.empty()) std::memcpy(dst, in.bytes.data(), in.bytes.size());
  loop_->Defer([done = std::move(done)]() mutable {
    std::move(done)(absl::OkStatus());
  });
}

absl::Status WorkerServer::Impl::Execute(const SessionPtr& sp, Message& m,
                                         Incoming& in) {
  Session& s = *sp;
  if (m.cmd() == Cmd::kBlobPart) {
    if (s.blob_parts.size() + m.blob.size() > kMaxBlob) {
      s.blob_parts.clear();
      return absl::ResourceExhaustedError(
          absl::StrCat("blob over ", kMaxBlob, " bytes"));
    }
    s.blob_parts += m.blob;
    return absl::OkStatus();
  }
  if (CommandFields(m.cmd()) & kFBlob) {
    m.blob = std::move(s.blob_parts) + m.blob;
    s.blob_parts.clear();
  }
  switch (m.cmd()) {
    case Cmd::kAllocBuffer:
      return AllocBuffer(sp, m);
    case Cmd::kFreeBuffer:
      return FreeBuffer(sp, m);
    case Cmd::kCreateStream:
      return CreateStream(sp, m);
    case Cmd::kDestroyStream:
      return DestroyStream(sp, m);
    case Cmd::kSetTensor:
      return SetTensor(sp, m, in);
    case Cmd::kGetTensor:
      return GetTensor(sp, m);
    case Cmd::kMemset:
      return Memset(sp, m);
    case Cmd::kCopyLocal:
      return CopyLocal(sp, m);
    case Cmd::kDefineGraph:
      return DefineGraph(sp, m);
    case Cmd::kDropGraph:
      return DropGraph(sp, m);
    case Cmd::kLaunch:
      return Launch(sp, m);
    case Cmd::kRecord:
      return Record(sp, m);
    case Cmd::kWaitStream:
      return WaitStream(sp, m);
    case Cmd::kWaitGate:
      return WaitGate(sp, m);
    case Cmd::kSignalGate:
      return SignalGate(sp, m);
    case Cmd::kResetStream:
      return ResetStream(sp, m);
    case Cmd::kSendToPeer:
      return SendToPeer(sp, m);
    case Cmd::kRecvFromPeer:
      return RecvFromPeer(sp, m);
    case Cmd::kCancelTransfer:
      return CancelTransfer(sp, m);
    case Cmd::kLoadFile:
      return LoadFile(sp, m);
    case Cmd::kPing:
      return Ping(sp, m);
    case Cmd::kSupportsOp:
      return SupportsOp(sp, m);
    case Cmd::kAllocSize:
      return AllocSize(sp, m);
    case Cmd::kTrace:
      return Trace(sp, m);
    case Cmd::kTraceSpans:
      return TraceSpans(sp, m);
    case Cmd::kEngineStats:
      return EngineStats(sp, m);
    case Cmd::kStats:
      return Stats(sp, m);
    case Cmd::kHello:
    case Cmd::kPeerData:
    case Cmd::kBlobPart:
      break;
  }
  return absl::InvalidArgumentError("unexpected command");
}

}  // namespace ferry::remote
