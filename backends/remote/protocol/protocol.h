// The remote protocol: the messages a client, a ferry worker and worker peers
// exchange over UCX active messages, and their bounds-checked codec.
//
// Every message is an active-message header (encoded here) plus an optional
// payload of tensor bytes, which UCX moves without copies where it can
// (rendezvous into the destination). Three AM ids:
//   kAmCommand  client -> worker: a Command (header), bytes for kSetTensor
//   kAmReply    worker -> client: a Reply, bytes for kGetData
//   kAmPeer     worker -> worker: a Command (kHello, kPeerData) and bytes
// A header is: kind (u8), a field mask (u32) naming the fields present, then
// those fields in the order of the Field enum. Decoding is strict: each kind
// has exactly one mask, strings and blobs have bounded lengths, and nothing
// may follow the last field. Decoding never trusts a length it has not
// checked against what is left, so a hostile header is a status, never an
// out-of-bounds read.
#ifndef FERRY_BACKENDS_REMOTE_PROTOCOL_PROTOCOL_H_
#define FERRY_BACKENDS_REMOTE_PROTOCOL_PROTOCOL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/device.h"

namespace ferry::remote {

inline constexpr uint32_t kProtocolVersion = 7;

enum AmId : unsigned { kAmCommand = 1, kAmReply = 2, kAmPeer = 3 };

// Commands. Those with a `req` get a kResult reply; stream work is ordered
// by `seq` and answered only through kRecord's kSignaled / kStreamFailed.
enum class Cmd : uint8_t {
  kHello = 1,       // text: token, value: version, byte: role (Role)
  kAllocBuffer,     // req, device, size, byte: 1 for the device's weights
                    // type (DeviceInfo::weights_type), else its default
  kFreeBuffer,      // buffer
  kCreateStream,    // req, device, text: backend params
  kDestroyStream,   // stream
  kSetTensor,       // stream, buffer, offset, size, byte: 1 to read the
                    // bytes in stream order (rendezvous), blob: a tensor ref
                    // or empty (below); payload: the bytes
  kGetTensor,       // req, stream, buffer, offset, size, blob: as kSetTensor,
                    // value: 0, or a value to record right after the get
                    // (as kRecord; its kGetData reply stands for kSignaled)
  kMemset,          // req, buffer, offset, size, byte, blob: as kSetTensor
  kCopyLocal,       // stream, src_stream, src_buffer, src_offset, buffer,
                    // offset, size
  kDefineGraph,     // req, device, blob: wire graph
  kDropGraph,       // id: graph
  kLaunch,          // stream, id: graph
  kRecord,          // stream, value
  kWaitStream,      // stream, src_stream, value
  kWaitGate,        // stream, id: gate
  kSignalGate,      // id: gate, code, text: message
  kResetStream,     // req, stream
  kSendToPeer,      // stream, buffer, offset, size, text: peer address,
                    // value: peer session, id: transfer, cap: the peer
                    // session's capability (its hello reply's)
  kRecvFromPeer,    // stream, buffer, offset, size, id: transfer
  kLoadFile,        // stream, buffer, offset, size, text: path, value: file
                    // offset, blob: as kSetTensor
  kPing,            // req; the reply's value: the worker's clock (ns)
  kSupportsOp,      // req, device, blob: wire graph of one node, placed
                    // where its tensors are already on the worker; the
                    // reply's value is 1, or its code and text say why not
  kPeerData,        // (peer) value: session, id: transfer, code, text,
                    // cap: the receiving session's capability (the bytes
                    // go nowhere without it); payload: the bytes when OK
  kStats,           // req
  kBlobPart,        // blob: leading bytes of the next command's blob
  kAllocSize,       // req, device, blob: a tensor ref (unplaced); the reply's
                    // value is the bytes the weights type gives it
  kEngineStats,     // req, device; the reply's text: one line per engine of
                    // the device, "name\tbusy_ns\tops\tbytes" (DeviceCounters)
  kTrace,           // value: 1 to record trace spans of the worker's devices
                    // for this session, 0 to stop
  kTraceSpans,      // req; the reply's data: the spans recorded since the
                    // last kTraceSpans (EncodeTraceSpans), oldest first, on
                    // the worker's clock (kPing gives it)
  kCancelTransfer,  // id: transfer, code (not OK), text: the bytes of this
                    // kRecvFromPeer will not come (the sending worker
                    // failed or cannot reach this one); its stream fails
  kLast = kCancelTransfer,
};

// Byte ranges of kSetTensor, kGetTensor, kMemset and kLoadFile are buffer
// offsets. With an empty blob they are raw bytes; a weights-type buffer
// needs a tensor ref (wire_graph.h) naming the tensor the range is part of,
// and then the bytes are the tensor's logical (row-major) bytes, placed as
// the worker's type lays the tensor out (the CPU: in panels). Copies between
// buffers (kCopyLocal, kSendToPeer, kRecvFromPeer) take no weights buffer.

enum class Role : uint8_t { kClient = 1, kPeer = 2 };

enum class ReplyKind : uint8_t {
  kHello = 1,      // code, text, value: session, blob: device infos,
                   // id: the worker's effective user id, cap: the
                   // session's capability (random, 128 bits): what a peer
                   // worker must present to deliver bytes into it
  kResult,         // req, code, text, value
  kSignaled,       // stream, value
  kStreamFailed,   // stream, value, code, text
  kGetData,        // req, code, text; payload: the bytes when OK
  kTransferEnded,  // stream, id: transfer, code, text: a kSendToPeer of
                   // the stream sent its bytes to the peer, or (code not
                   // OK) could not
  kLast = kTransferEnded,
};

// Field bits of the mask, in encoding order.
enum Field : uint32_t {
  kFSeq = 1u << 0,
  kFReq = 1u << 1,
  kFStream = 1u << 2,
  kFSrcStream = 1u << 3,
  kFBuffer = 1u << 4,
  kFOffset = 1u << 5,
  kFSrcBuffer = 1u << 6,
  kFSrcOffset = 1u << 7,
  kFSize = 1u << 8,
  kFValue = 1u << 9,
  kFId = 1u << 10,
  kFDevice = 1u << 11,
  kFByte = 1u << 12,
  kFCode = 1u << 13,
  kFText = 1u << 14,
  kFBlob = 1u << 15,
  kFCap = 1u << 16,
};

// An unguessable 128-bit capability (two little-endian words).
using Capability = std::array<uint64_t, 2>;
// 128 bits from the kernel's CSPRNG (getrandom); fails only if the kernel
// cannot give them.
absl::StatusOr<Capability> NewCapability();
// Constant-time comparison.
bool SameCapability(const Capability& a, const Capability& b);

inline constexpr size_t kMaxText = 2048;
// Blobs longer than this travel as kBlobPart messages before their command:
// active-message headers must stay small (UCX's rendezvous header limit).
inline constexpr size_t kBlobChunk = 4096;
inline constexpr size_t kMaxBlob = 64u << 20;

// One message's fields; which are meaningful depends on the kind.
struct Message {
  uint8_t kind = 0;  // A Cmd or a ReplyKind.
  uint64_t seq = 0;  // Commands on a session are processed in seq order.
  uint64_t req = 0;
  uint64_t stream = 0;
  uint64_t src_stream = 0;
  uint64_t buffer = 0;
  uint64_t offset = 0;
  uint64_t src_buffer = 0;
  uint64_t src_offset = 0;
  uint64_t size = 0;
  uint64_t value = 0;
  uint64_t id = 0;
  uint32_t device = 0;
  uint8_t byte = 0;
  uint32_t code = 0;  // absl::StatusCode.
  std::string text;
  std::string blob;
  Capability cap = {0, 0};

  Cmd cmd() const { return static_cast<Cmd>(kind); }
  ReplyKind reply() const { return static_cast<ReplyKind>(kind); }
  absl::Status status() const;
  void set_status(const absl::Status& status);
};

// The field mask each kind carries (0 for an unknown kind).
uint32_t CommandFields(Cmd cmd);
uint32_t ReplyFields(ReplyKind kind);

// Encodes `m` (its kind's fields) into a header.
std::string EncodeCommand(const Message& m);
std::string EncodeReply(const Message& m);
// Decodes a header; InvalidArgument names what is wrong.
absl::StatusOr<Message> DecodeCommand(absl::string_view header);
absl::StatusOr<Message> DecodeReply(absl::string_view header);

absl::string_view CmdName(Cmd cmd);

// What a worker says about each device it serves (the hello reply's blob).
struct DeviceInfo {
  std::string name;  // The worker's name for it ("sim0").
  DeviceType type = DeviceType::kCpu;
  uint64_t memory_free = 0;
  uint64_t memory_total = 0;
  uint64_t alignment = 64;
  uint64_t max_size = 0;
  std::string description;
  // The device's weights_buffer_type() when it is not its default type (e.g.
  // "cpu_packed"), else empty; its alignment.
  std::string weights_type;
  uint64_t weights_alignment = 64;
};
std::string EncodeDeviceInfos(const std::vector<DeviceInfo>& infos);
absl::StatusOr<std::vector<DeviceInfo>> DecodeDeviceInfos(
    absl::string_view blob);

// A trace span as a worker sends it (kTraceSpans), on the worker's clock.
struct WireSpan {
  std::string track;  // The worker's track name ("cpu/compute").
  std::string name;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};
std::string EncodeTraceSpans(const std::vector<WireSpan>& spans);
absl::StatusOr<std::vector<WireSpan>> DecodeTraceSpans(absl::string_view data);

// Little-endian primitive writer and a reader that checks every read.
class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v);
  void U64(uint64_t v);
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Str(absl::string_view s);
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  absl::Status U8(uint8_t* v);
  absl::Status U32(uint32_t* v);
  absl::Status U64(uint64_t* v);
  absl::Status I32(int32_t* v);
  absl::Status I64(int64_t* v);
  // A string of at most `max` bytes.
  absl::Status Str(std::string* s, size_t max, absl::string_view what);
  bool done() const { return in_.empty(); }
  size_t left() const { return in_.size(); }

 private:
  absl::Status Take(size_t n, const char** p);
  absl::string_view in_;
};

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_PROTOCOL_PROTOCOL_H_
