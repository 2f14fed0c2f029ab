#include "ferry/backends/remote/protocol/protocol.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::remote {

absl::Status Message::status() const {
  if (code == 0) return absl::OkStatus();
  const uint32_t c = code <= 16 ? code : 2;  // Unknown codes: kUnknown.
  return absl::Status(static_cast<absl::StatusCode>(c), text);
}

absl::StatusOr<Capability> NewCapability() {
  Capability cap;
  char* p = reinterpret_cast<char*>(cap.data());
  size_t got = 0;
  while (got < sizeof(cap)) {
    const ssize_t n = getrandom(p + got, sizeof(cap) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(
          absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return cap;
}

bool SameCapability(const Capability& a, const Capability& b) {
  // No early exit: the time taken says nothing about where they differ.
  volatile uint64_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | (a[i] ^ b[i]);
  return diff == 0;
}

void Message::set_status(const absl::Status& status) {
  code = static_cast<uint32_t>(status.code());
  text = std::string(status.message().substr(0, kMaxText));
}

uint32_t CommandFields(Cmd cmd) {
  constexpr uint32_t kS = kFSeq;
  constexpr uint32_t kRange = kFBuffer | kFOffset | kFSize;
  switch (cmd) {
    case Cmd::kHello:
      return kFValue | kFByte | kFText;
    case Cmd::kAllocBuffer:
      return kS | kFReq | kFDevice | kFSize | kFByte;
    case Cmd::kFreeBuffer:
      return kS | kFBuffer;
    case Cmd::kCreateStream:
      return kS | kFReq | kFDevice | kFText;
    case Cmd::kDestroyStream:
      return kS | kFStream;
    case Cmd::kSetTensor:
      return kS | kFStream | kRange | kFByte | kFBlob;
    case Cmd::kGetTensor:
      return kS | kFReq | kFStream | kRange | kFBlob | kFValue;
    case Cmd::kMemset:
      return kS | kFReq | kRange | kFByte | kFBlob;
    case Cmd::kCopyLocal:
      return kS | kFStream | kFSrcStream | kFSrcBuffer | kFSrcOffset | kRange;
    case Cmd::kDefineGraph:
      return kS | kFReq | kFDevice | kFBlob;
    case Cmd::kDropGraph:
      return kS | kFId;
    case Cmd::kLaunch:
      return kS | kFStream | kFId;
    case Cmd::kRecord:
      return kS | kFStream | kFValue;
    case Cmd::kWaitStream:
      return kS | kFStream | kFSrcStream | kFValue;
    case Cmd::kWaitGate:
      return kS | kFStream | kFId;
    case Cmd::kSignalGate:
      return kS | kFId | kFCode | kFText;
    case Cmd::kResetStream:
      return kS | kFReq | kFStream;
    case Cmd::kSendToPeer:
      return kS | kFStream | kRange | kFText | kFValue | kFId | kFCap;
    case Cmd::kRecvFromPeer:
      return kS | kFStream | kRange | kFId;
    case Cmd::kLoadFile:
      return kS | kFStream | kRange | kFText | kFValue | kFBlob;
    case Cmd::kPing:
      return kS | kFReq;
    case Cmd::kSupportsOp:
      return kS | kFReq | kFDevice | kFBlob;
    case Cmd::kPeerData:
      return kFValue | kFId | kFCode | kFText | kFCap;
    case Cmd::kStats:
      return kS | kFReq;
    case Cmd::kBlobPart:
      return kS | kFBlob;
    case Cmd::kAllocSize:
      return kS | kFReq | kFDevice | kFBlob;
    case Cmd::kEngineStats:
      return kS | kFReq | kFDevice;
    case Cmd::kTrace:
      return kS | kFValue;
    case Cmd::kCancelTransfer:
      return kS | kFId | kFCode | kFText;
    case Cmd::kTraceSpans:
      return kS | kFReq;
  }
  return 0;
}

uint32_t ReplyFields(ReplyKind kind) {
  switch (kind) {
    case ReplyKind::kHello:
      return kFCode | kFText | kFValue | kFBlob | kFId | kFCap;
    case ReplyKind::kResult:
      return kFReq | kFCode | kFText | kFValue;
    case ReplyKind::kSignaled:
      return kFStream | kFValue;
    case ReplyKind::kStreamFailed:
      return kFStream | kFValue | kFCode | kFText;
    case ReplyKind::kGetData:
      return kFReq | kFCode | kFText;
    case ReplyKind::kTransferEnded:
      return kFStream | kFId | kFCode | kFText;
  }
  return 0;
}

absl::string_view CmdName(Cmd cmd) {
  static constexpr absl::string_view kNames[] = {
      "invalid",       "hello",          "alloc_buffer",   "free_buffer",
      "create_stream", "destroy_stream", "set_tensor",     "get_tensor",
      "memset",        "copy_local",     "define_graph",   "drop_graph",
      "launch",        "record",         "wait_stream",    "wait_gate",
      "signal_gate",   "reset_stream",   "send_to_peer",   "recv_from_peer",
      "load_file",     "ping",           "supports_op",    "peer_data",
      "stats",         "blob_part",      "alloc_size",     "engine_stats",
      "trace",         "trace_spans",    "cancel_transfer"};
  const size_t i = static_cast<size_t>(cmd);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "invalid";
}

void Writer::U32(uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out_.append(b, 4);
}

void Writer::U64(uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out_.append(b, 8);
}

void Writer::Str(absl::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  out_.append(s.data(), s.size());
}

absl::Status Reader::Take(size_t n, const char** p) {
  if (in_.size() < n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "message truncated: ", n, " bytes needed, ", in_.size(), " left"));
  }
  *p = in_.data();
  in_.remove_prefix(n);
  return absl::OkStatus();
}

absl::Status Reader::U8(uint8_t* v) {
  const char* p;
  FERRY_RETURN_IF_ERROR(Take(1, &p));
  *v = static_cast<uint8_t>(*p);
  return absl::OkStatus();
}

absl::Status Reader::U32(uint32_t* v) {
  const char* p;
  FERRY_RETURN_IF_ERROR(Take(4, &p));
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i)
    r |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  *v = r;
  return absl::OkStatus();
}

absl::Status Reader::U64(uint64_t* v) {
  const char* p;
  FERRY_RETURN_IF_ERROR(Take(8, &p));
  uint64_t r = 0;
  for (int i = 0; i < 8; ++i)
    r |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  *v = r;
  return absl::OkStatus();
}

absl::Status Reader::I32(int32_t* v) {
  uint32_t u;
  FERRY_RETURN_IF_ERROR(U32(&u));
  *v = static_cast<int32_t>(u);
  return absl::OkStatus();
}

absl::Status Reader::I64(int64_t* v) {
  uint64_t u;
  FERRY_RETURN_IF_ERROR(U64(&u));
  *v = static_cast<int64_t>(u);
  return absl::OkStatus();
}

absl::Status Reader::Str(std::string* s, size_t max, absl::string_view what) {
  uint32_t n;
  FERRY_RETURN_IF_ERROR(U32(&n));
  if (n > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of ", n, " bytes is over the limit of ", max));
  }
  const char* p;
  FERRY_RETURN_IF_ERROR(Take(n, &p));
  s->assign(p, n);
  return absl::OkStatus();
}

namespace {

std::string Encode(const Message& m, uint32_t mask) {
  Writer w;
  w.U8(m.kind);
  w.U32(mask);
  if (mask & kFSeq) w.U64(m.seq);
  if (mask & kFReq) w.U64(m.req);
  if (mask & kFStream) w.U64(m.stream);
  if (mask & kFSrcStream) w.U64(m.src_stream);
  if (mask & kFBuffer) w.U64(m.buffer);
  if (mask & kFOffset) w.U64(m.offset);
  if (mask & kFSrcBuffer) w.U64(m.src_buffer);
  if (mask & kFSrcOffset) w.U64(m.src_offset);
  if (mask & kFSize) w.U64(m.size);
  if (mask & kFValue) w.U64(m.value);
  if (mask & kFId) w.U64(m.id);
  if (mask & kFDevice) w.U32(m.device);
  if (mask & kFByte) w.U8(m.byte);
  if (mask & kFCode) w.U32(m.code);
  if (mask & kFText) w.Str(m.text.substr(0, kMaxText));
  if (mask & kFBlob) w.Str(m.blob);
  if (mask & kFCap) {
    w.U64(m.cap[0]);
    w.U64(m.cap[1]);
  }
  return std::move(w.out());
}

absl::StatusOr<Message> Decode(absl::string_view header, bool reply) {
  Reader r(header);
  Message m;
  FERRY_RETURN_IF_ERROR(r.U8(&m.kind));
  const uint8_t last = reply ? static_cast<uint8_t>(ReplyKind::kLast)
                             : static_cast<uint8_t>(Cmd::kLast);
  if (m.kind == 0 || m.kind > last) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown ", reply ? "reply" : "command", " kind ", m.kind));
  }
  uint32_t mask;
  FERRY_RETURN_IF_ERROR(r.U32(&mask));
  const uint32_t want = reply ? ReplyFields(m.reply()) : CommandFields(m.cmd());
  if (mask != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        reply ? "reply " : "command ",
        reply ? absl::StrCat(m.kind) : std::string(CmdName(m.cmd())),
        ": field mask ", mask, " is not ", want));
  }
  if (mask & kFSeq) FERRY_RETURN_IF_ERROR(r.U64(&m.seq));
  if (mask & kFReq) FERRY_RETURN_IF_ERROR(r.U64(&m.req));
  if (mask & kFStream) FERRY_RETURN_IF_ERROR(r.U64(&m.stream));
  if (mask & kFSrcStream) FERRY_RETURN_IF_ERROR(r.U64(&m.src_stream));
  if (mask & kFBuffer) FERRY_RETURN_IF_ERROR(r.U64(&m.buffer));
  if (mask & kFOffset) FERRY_RETURN_IF_ERROR(r.U64(&m.offset));
  if (mask & kFSrcBuffer) FERRY_RETURN_IF_ERROR(r.U64(&m.src_buffer));
  if (mask & kFSrcOffset) FERRY_RETURN_IF_ERROR(r.U64(&m.src_offset));
  if (mask & kFSize) FERRY_RETURN_IF_ERROR(r.U64(&m.size));
  if (mask & kFValue) FERRY_RETURN_IF_ERROR(r.U64(&m.value));
  if (mask & kFId) FERRY_RETURN_IF_ERROR(r.U64(&m.id));
  if (mask & kFDevice) FERRY_RETURN_IF_ERROR(r.U32(&m.device));
  if (mask & kFByte) FERRY_RETURN_IF_ERROR(r.U8(&m.byte));
  if (mask & kFCode) {
    FERRY_RETURN_IF_ERROR(r.U32(&m.code));
    if (m.code > 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("status code ", m.code, " is not a status code"));
    }
  }
  if (mask & kFText) FERRY_RETURN_IF_ERROR(r.Str(&m.text, kMaxText, "text"));
  if (mask & kFBlob) {
    FERRY_RETURN_IF_ERROR(
        r.Str(&m.blob, reply ? kMaxBlob : kBlobChunk, "blob"));
  }
  if (mask & kFCap) {
    FERRY_RETURN_IF_ERROR(r.U64(&m.cap[0]));
    FERRY_RETURN_IF_ERROR(r.U64(&m.cap[1]));
  }
  if (!r.done()) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.left(), " bytes after the last field"));
  }
  return m;
}

}  // namespace

std::string EncodeCommand(const Message& m) {
  return Encode(m, CommandFields(m.cmd()));
}
std::string EncodeReply(const Message& m) {
  return Encode(m, ReplyFields(m.reply()));
}
absl::StatusOr<Message> DecodeCommand(absl::string_view header) {
  return Decode(header, /*reply=*/false);
}
absl::StatusOr<Message> DecodeReply(absl::string_view header) {
  return Decode(header, /*reply=*/true);
}

std::string EncodeDeviceInfos(const std::vector<DeviceInfo>& infos) {
  Writer w;
  w.U32(static_cast<uint32_t>(infos.size()));
  for (const DeviceInfo& d : infos) {
    w.Str(d.name);
    w.U8(static_cast<uint8_t>(d.type));
    w.U64(d.memory_free);
    w.U64(d.memory_total);
    w.U64(d.alignment);
    w.U64(d.max_size);
    w.Str(d.description);
    w.Str(d.weights_type);
    w.U64(d.weights_alignment);
  }
  return std::move(w.out());
}

std::string EncodeTraceSpans(const std::vector<WireSpan>& spans) {
  Writer w;
  w.U32(static_cast<uint32_t>(spans.size()));
  for (const WireSpan& s : spans) {
    w.Str(s.track);
    w.Str(s.name);
    w.I64(s.begin_ns);
    w.I64(s.end_ns);
  }
  return std::move(w.out());
}

absl::StatusOr<std::vector<WireSpan>> DecodeTraceSpans(absl::string_view data) {
  Reader r(data);
  uint32_t n;
  FERRY_RETURN_IF_ERROR(r.U32(&n));
  // Each span takes at least 24 bytes: a count past that is a lie.
  if (n > data.size() / 24) {
    return absl::InvalidArgumentError(
        absl::StrCat(n, " spans in ", data.size(), " bytes"));
  }
  std::vector<WireSpan> out(n);
  for (WireSpan& s : out) {
    FERRY_RETURN_IF_ERROR(r.Str(&s.track, 256, "span track"));
    FERRY_RETURN_IF_ERROR(r.Str(&s.name, kMaxText, "span name"));
    FERRY_RETURN_IF_ERROR(r.I64(&s.begin_ns));
    FERRY_RETURN_IF_ERROR(r.I64(&s.end_ns));
    if (s.end_ns < s.begin_ns) {
      return absl::InvalidArgumentError("a span ends before it begins");
    }
  }
  if (!r.done()) return absl::InvalidArgumentError("bytes after the spans");
  return out;
}

absl::StatusOr<std::vector<DeviceInfo>> DecodeDeviceInfos(
    absl::string_view blob) {
  Reader r(blob);
  uint32_t n;
  FERRY_RETURN_IF_ERROR(r.U32(&n));
  if (n > 256) return absl::InvalidArgumentError("over 256 devices");
  std::vector<DeviceInfo> out(n);
  for (DeviceInfo& d : out) {
    uint8_t type;
    FERRY_RETURN_IF_ERROR(r.Str(&d.name, 64, "device name"));
    FERRY_RETURN_IF_ERROR(r.U8(&type));
    if (type > static_cast<uint8_t>(DeviceType::kAccel)) {
      return absl::InvalidArgumentError(absl::StrCat("device type ", type));
    }
    d.type = static_cast<DeviceType>(type);
    FERRY_RETURN_IF_ERROR(r.U64(&d.memory_free));
    FERRY_RETURN_IF_ERROR(r.U64(&d.memory_total));
    FERRY_RETURN_IF_ERROR(r.U64(&d.alignment));
    FERRY_RETURN_IF_ERROR(r.U64(&d.max_size));
    FERRY_RETURN_IF_ERROR(r.Str(&d.description, kMaxText, "description"));
    FERRY_RETURN_IF_ERROR(r.Str(&d.weights_type, 64, "weights type"));
    FERRY_RETURN_IF_ERROR(r.U64(&d.weights_alignment));
    for (uint64_t alignment : {d.alignment, d.weights_alignment}) {
      if (alignment == 0 || (alignment & (alignment - 1)) != 0 ||
          alignment > 4096) {
        return absl::InvalidArgumentError(
            absl::StrCat("device '", d.name, "': alignment ", alignment));
      }
    }
  }
  if (!r.done()) return absl::InvalidArgumentError("bytes after devices");
  return out;
}

}  // namespace ferry::remote
