// A worker facing bad clients: a wrong token, commands out of bounds,
// malformed headers and graphs, paths outside its weights directory, and a
// client that goes away. Each gets an error (a reply, or its stream fails)
// and the worker keeps serving; nothing it held for a gone client stays.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ferry/backends/remote/client/connection.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/protocol/wire_graph.h"
#include "ferry/backends/remote/testing/worker_process.h"
#include "ferry/backends/remote/transport/address.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "gtest/gtest.h"

namespace ferry::remote {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;
using testing::kTestToken;
using ::testing::Not;
using testing::WorkerProcess;

Message Command(Cmd cmd) {
  Message m;
  m.kind = static_cast<uint8_t>(cmd);
  return m;
}

std::vector<int64_t> WorkerCounters(Connection& c);

class RemoteSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_TMPDIR"));
    std::ofstream(dir_ + "/weights.bin", std::ios::binary)
        << std::string(4096, '\x2a');
    FERRY_ASSERT_OK_AND_ASSIGN(
        worker_,
        WorkerProcess::Start({"--devices=cpu,sim0", "--weights_dir=" + dir_}));
    FERRY_ASSERT_OK_AND_ASSIGN(c_, Connect());
  }

  absl::StatusOr<std::shared_ptr<Connection>> Connect(
      std::string token = kTestToken) {
    absl::StatusOr<HostPort> hp = ParseHostPort(worker_->address());
    if (!hp.ok()) return hp.status();
    return Connection::Open(*hp, std::move(token));
  }

  absl::StatusOr<uint64_t> Alloc(uint64_t size, uint32_t device = 0,
                                 uint8_t kind = 0) {
    Message m = Command(Cmd::kAllocBuffer);
    m.device = device;
    m.size = size;
    m.byte = kind;
    absl::StatusOr<Message> r = c_->Call(std::move(m));
    if (!r.ok()) return r.status();
    return r->value;
  }

  // A stream on device 0 and its client-side timeline.
  struct Stream {
    uint64_t id;
    std::shared_ptr<TimelineSemaphore> timeline;
    uint64_t value = 0;
  };
  Stream NewStream(uint32_t device = 0) {
    Message m = Command(Cmd::kCreateStream);
    m.device = device;
    absl::StatusOr<Message> r = c_->Call(std::move(m));
    EXPECT_TRUE(r.ok()) << r.status();
    Stream s{r.ok() ? r->value : 0, std::make_shared<TimelineSemaphore>(0)};
    c_->AddStream(s.id, s.timeline);
    return s;
  }
  // Records on `s` and waits: the stream's status.
  absl::Status Finish(Stream& s) {
    Message m = Command(Cmd::kRecord);
    m.stream = s.id;
    m.value = ++s.value;
    c_->Send(std::move(m));
    return s.timeline->WaitBlocking(s.value, absl::Now() + absl::Seconds(10));
  }
  absl::Status Ping() { return c_->Call(Command(Cmd::kPing)).status(); }

  std::string dir_;
  std::unique_ptr<WorkerProcess> worker_;
  std::shared_ptr<Connection> c_;
};

TEST_F(RemoteSecurityTest, AWrongTokenGetsNothing) {
  EXPECT_THAT(Connect("not-the-token"), StatusIs(absl::StatusCode::kUnavailable,
                                                 HasSubstr("wrong token")));
  EXPECT_THAT(Connect(""), StatusIs(absl::StatusCode::kUnavailable));
  FERRY_EXPECT_OK(Ping());
}

TEST_F(RemoteSecurityTest, RequestsOutOfBoundsGetErrors) {
  EXPECT_THAT(Alloc(64, /*device=*/7), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Alloc(~uint64_t{0} - 8), Not(::ferry::testing::IsOk()));
  FERRY_ASSERT_OK_AND_ASSIGN(uint64_t buffer, Alloc(256));
  Message memset = Command(Cmd::kMemset);
  memset.buffer = buffer;
  memset.offset = 200;
  memset.size = 100;  // Past the end.
  EXPECT_THAT(c_->Call(memset),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("buffer")));
  memset.offset = ~uint64_t{0} - 10;  // Wraps around.
  memset.size = 20;
  EXPECT_THAT(c_->Call(memset), StatusIs(absl::StatusCode::kOutOfRange));
  memset.buffer = buffer + 1000;  // Not this session's.
  memset.offset = 0;
  EXPECT_THAT(c_->Call(memset), StatusIs(absl::StatusCode::kNotFound));
  Message stream = Command(Cmd::kCreateStream);
  stream.device = 9;
  EXPECT_THAT(c_->Call(stream), StatusIs(absl::StatusCode::kNotFound));
  Message engines = Command(Cmd::kEngineStats);
  engines.device = 1u << 31;
  EXPECT_THAT(c_->Call(engines), StatusIs(absl::StatusCode::kNotFound));
  FERRY_EXPECT_OK(Ping());
}

TEST_F(RemoteSecurityTest, StreamWorkOutOfBoundsFailsTheStream) {
  FERRY_ASSERT_OK_AND_ASSIGN(uint64_t buffer, Alloc(256));
  Stream s = NewStream();
  std::vector<char> bytes(128, 1);
  Message set = Command(Cmd::kSetTensor);
  set.stream = s.id;
  set.buffer = buffer;
  set.offset = 192;  // 192 + 128 > 256.
  set.size = bytes.size();
  c_->Send(set, bytes.data(), bytes.size());
  EXPECT_THAT(Finish(s),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("set_tensor")));
  // A size that does not match the bytes sent.
  set.offset = 0;
  set.size = 64;
  Stream s2 = NewStream();
  set.stream = s2.id;
  c_->Send(set, bytes.data(), bytes.size());
  EXPECT_THAT(Finish(s2), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("carries")));
  // A copy from another stream's buffer range that is out of bounds.
  Stream s3 = NewStream();
  Message copy = Command(Cmd::kCopyLocal);
  copy.stream = s3.id;
  copy.src_stream = s3.id;
  copy.src_buffer = buffer;
  copy.src_offset = 250;
  copy.buffer = buffer;
  copy.offset = 0;
  copy.size = 64;
  c_->Send(copy);
  EXPECT_THAT(Finish(s3), StatusIs(absl::StatusCode::kOutOfRange));
  // A wait for a value the other stream never recorded.
  Stream s4 = NewStream();
  Message wait = Command(Cmd::kWaitStream);
  wait.stream = s4.id;
  wait.src_stream = s3.id;
  wait.value = 99;
  c_->Send(wait);
  EXPECT_THAT(Finish(s4), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("recorded only")));
  FERRY_EXPECT_OK(Ping());
}

// Records and waits on a stream held by an unsignalled gate: a stream
// waiting on itself, or two on each other, copy the gates they wait for.
// Those copies must not grow with each pair (doubling them ran the worker
// out of memory in ~60 messages).
TEST_F(RemoteSecurityTest, WaitsOnRecordsDoNotGrowTheWorker) {
  Stream a = NewStream();
  Stream b = NewStream();
  Message gate = Command(Cmd::kWaitGate);
  gate.stream = a.id;
  gate.id = 1;
  c_->Send(gate);
  for (int i = 0; i < 200; ++i) {
    for (Stream* s : {&a, &b}) {
      Message record = Command(Cmd::kRecord);
      record.stream = s->id;
      record.value = ++s->value;
      c_->Send(record);
    }
    Message wait = Command(Cmd::kWaitStream);
    wait.stream = a.id;
    wait.src_stream = a.id;
    wait.value = a.value;
    c_->Send(wait);
    wait.stream = b.id;
    wait.src_stream = a.id;
    c_->Send(wait);
    wait.stream = a.id;
    wait.src_stream = b.id;
    wait.value = b.value;
    c_->Send(wait);
  }
  const absl::Time start = absl::Now();
  FERRY_ASSERT_OK(c_->Call(Command(Cmd::kPing), absl::Seconds(5)).status());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  Message signal = Command(Cmd::kSignalGate);
  signal.id = 1;
  c_->Send(signal);
  FERRY_EXPECT_OK(Finish(a));
  FERRY_EXPECT_OK(Finish(b));
}

// A buffer of the CPU's weights type holds panels: raw bytes in or out, a
// copy from it, or a ref that leaves it are refused, never misplaced.
TEST_F(RemoteSecurityTest, WeightsBuffersTakeOnlyNamedTensors) {
  EXPECT_THAT(Alloc(256, 0, /*kind=*/2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kind")));
  Tensor w;
  w.dtype = DType::kF32;
  w.ne = {16, 520, 1, 1};
  w.nb = ContiguousStrides(w.dtype, w.ne);
  w.name = "w";
  Message size = Command(Cmd::kAllocSize);
  size.device = 0;
  size.blob = EncodeTensorRef(w, 0, nullptr, 0);
  FERRY_ASSERT_OK_AND_ASSIGN(Message sized, c_->Call(size));
  EXPECT_EQ(sized.value, 16u * 576 * 4);  // Padded to whole panels.
  size.blob = "junk";
  EXPECT_THAT(c_->Call(size), StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_ASSERT_OK_AND_ASSIGN(uint64_t weights, Alloc(sized.value, 0, 1));
  FERRY_ASSERT_OK_AND_ASSIGN(uint64_t plain, Alloc(4096));
  std::vector<char> bytes(128, 1);
  auto set = [&](Stream& s, uint64_t offset, std::string blob) {
    Message m = Command(Cmd::kSetTensor);
    m.stream = s.id;
    m.buffer = weights;
    m.offset = offset;
    m.size = bytes.size();
    m.blob = std::move(blob);
    c_->Send(m, bytes.data(), bytes.size());
    return Finish(s);
  };
  Stream s1 = NewStream();
  EXPECT_THAT(set(s1, 0, ""), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("name the tensor")));
  Stream s2 = NewStream();
  FERRY_EXPECT_OK(set(s2, 0, EncodeTensorRef(w, 0, nullptr, 0)));
  // The range must lie inside the named tensor's logical bytes.
  Stream s3 = NewStream();
  EXPECT_THAT(set(s3, 16 * 520 * 4 - 64, EncodeTensorRef(w, 0, nullptr, 0)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'w'")));
  // A ref whose panels would leave the buffer.
  Stream s4 = NewStream();
  EXPECT_THAT(set(s4, 64, EncodeTensorRef(w, 64, nullptr, 0)),
              StatusIs(absl::StatusCode::kOutOfRange));
  Stream s5 = NewStream();
  Message copy = Command(Cmd::kCopyLocal);
  copy.stream = s5.id;
  copy.src_stream = s5.id;
  copy.src_buffer = weights;
  copy.src_offset = 0;
  copy.buffer = plain;
  copy.offset = 0;
  copy.size = 64;
  c_->Send(copy);
  EXPECT_THAT(Finish(s5), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("weights")));
  FERRY_EXPECT_OK(Ping());
}

TEST_F(RemoteSecurityTest, HostileGraphsAreRefusedBeforeTheyRun) {
  FERRY_ASSERT_OK_AND_ASSIGN(uint64_t buffer, Alloc(1024));
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x, ctx.NewTensor(DType::kF32, {64}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx, x, 2.0f));
  Tensor* nodes[] = {y};
  auto define = [&](uint64_t offset_x, uint64_t buffer_id) {
    auto locate = [&](const Tensor& t) -> absl::StatusOr<WirePlace> {
      return WirePlace{buffer_id, &t == x ? offset_x : 512};
    };
    WireLocate ref = locate;
    x->data = reinterpret_cast<void*>(1);
    y->data = reinterpret_cast<void*>(1);
    absl::StatusOr<std::string> blob = EncodeNodes(nodes, &ref);
    EXPECT_TRUE(blob.ok());
    Message m = Command(Cmd::kDefineGraph);
    m.device = 0;
    m.blob = *blob;
    return c_->Call(std::move(m)).status();
  };
  FERRY_EXPECT_OK(define(0, buffer));
  // x's 256 bytes at 900 leave the 1024-byte buffer.
  EXPECT_THAT(define(900, buffer),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'x'")));
  EXPECT_THAT(define(0, buffer + 77), StatusIs(absl::StatusCode::kNotFound));
  // A SupportsOp query's places get the same checks (y left unplaced).
  auto query = [&](uint64_t offset_x, uint64_t buffer_id) {
    auto locate = [&](const Tensor& t) -> absl::StatusOr<WirePlace> {
      if (&t == y) return absl::NotFoundError("not placed yet");
      return WirePlace{buffer_id, offset_x};
    };
    WireLocate ref = locate;
    absl::StatusOr<std::string> blob =
        EncodeNodes(nodes, &ref, /*with_names=*/true, WirePlacing::kWhereKnown);
    EXPECT_TRUE(blob.ok());
    Message m = Command(Cmd::kSupportsOp);
    m.device = 0;
    m.blob = *blob;
    return c_->Call(std::move(m));
  };
  absl::StatusOr<Message> supported = query(0, buffer);
  FERRY_ASSERT_OK(supported.status());
  EXPECT_EQ(supported->value, 1u);
  EXPECT_THAT(query(900, buffer).status(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'x'")));
  EXPECT_THAT(query(0, buffer + 77).status(),
              StatusIs(absl::StatusCode::kNotFound));
  // Shapes the op does not allow: the device's own check refuses them.
  y->ne[0] = 128;
  EXPECT_THAT(define(0, buffer), Not(::ferry::testing::IsOk()));
  y->ne[0] = 64;
  // Garbage.
  Message junk = Command(Cmd::kDefineGraph);
  junk.blob = std::string("\xff\xff\xff\x7f garbage", 12);
  EXPECT_THAT(c_->Call(junk), StatusIs(absl::StatusCode::kInvalidArgument));
  // A launch of a graph that does not exist fails its stream.
  Stream s = NewStream();
  Message launch = Command(Cmd::kLaunch);
  launch.stream = s.id;
  launch.id = 123456;
  c_->Send(launch);
  EXPECT_THAT(Finish(s),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("graph")));
  FERRY_EXPECT_OK(Ping());
}

// kCancelTransfer only fails a pending receive of the client's own
// session, with a failure; cancels of transfers it does not have are
// ignored (nothing is kept for them), and the worker lives.
TEST_F(RemoteSecurityTest, CancelledTransfersFailOnlyTheirReceive) {
  {
    // An OK status is refused (a refused command ends that connection).
    FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Connection> other, Connect());
    Message ok = Command(Cmd::kCancelTransfer);
    ok.id = 77;
    other->Send(ok);
    EXPECT_THAT(other->Call(Command(Cmd::kPing)).status(),
                StatusIs(absl::StatusCode::kInternal,
                         HasSubstr("cancel_transfer with an OK status")));
  }
  FERRY_EXPECT_OK(Ping());
  FERRY_ASSERT_OK_AND_ASSIGN(uint64_t buffer, Alloc(256));
  Message recv = Command(Cmd::kRecvFromPeer);
  recv.buffer = buffer;
  recv.size = 256;
  // A cancel for a transfer whose receive has not come is dropped.
  Message early = Command(Cmd::kCancelTransfer);
  early.id = 4;
  early.set_status(absl::AbortedError("too early"));
  c_->Send(std::move(early));
  Stream e = NewStream();
  recv.stream = e.id;
  recv.id = 4;
  c_->Send(recv);
  Message record = Command(Cmd::kRecord);
  record.stream = e.id;
  record.value = ++e.value;
  c_->Send(record);
  EXPECT_THAT(
      e.timeline->WaitBlocking(e.value, absl::Now() + absl::Milliseconds(300)),
      StatusIs(absl::StatusCode::kDeadlineExceeded));
  for (uint64_t id = 1000; id < 11000; ++id) {
    Message flood = Command(Cmd::kCancelTransfer);
    flood.id = id;
    flood.set_status(absl::InternalError("flood"));
    c_->Send(std::move(flood));
  }
  FERRY_EXPECT_OK(Ping());
  // A pending receive fails with the cancel's status.
  Stream s = NewStream();
  recv.stream = s.id;
  recv.id = 5;
  c_->Send(recv);
  Message cancel = Command(Cmd::kCancelTransfer);
  cancel.id = 5;
  cancel.set_status(absl::AbortedError("the sender is gone"));
  c_->Send(std::move(cancel));
  EXPECT_THAT(Finish(s), StatusIs(absl::StatusCode::kAborted,
                                  HasSubstr("the sender is gone")));
  // Another pending receive still waits for its bytes.
  Stream t = NewStream();
  recv.stream = t.id;
  recv.id = 6;
  c_->Send(recv);
  record.stream = t.id;
  record.value = ++t.value;
  c_->Send(record);
  EXPECT_THAT(
      t.timeline->WaitBlocking(t.value, absl::Now() + absl::Milliseconds(300)),
      StatusIs(absl::StatusCode::kDeadlineExceeded));
  FERRY_EXPECT_OK(Ping());
}

// Another session (here: a client of a second worker, which any token
// holder can make send kPeerData anywhere) names the victim's session and
// transfer, which count from 1 and are easy to guess. Without the victim's
// capability its bytes are not written and its failure fails nothing; the
// victim's own transfer, sent with the capability, still lands.
TEST_F(RemoteSecurityTest, AnotherSessionCannotWriteOrFailAVictimsTransfer) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto sender,
                             WorkerProcess::Start({"--devices=cpu"}));
  FERRY_ASSERT_OK_AND_ASSIGN(HostPort sender_hp,
                             ParseHostPort(sender->address()));
  constexpr uint64_t kSize = 256;
  FERRY_ASSERT_OK_AND_ASSIGN(uint64_t victim_buffer, Alloc(kSize));
  Stream victim = NewStream();
  constexpr uint64_t kTransfer = 7;
  Message recv = Command(Cmd::kRecvFromPeer);
  recv.stream = victim.id;
  recv.buffer = victim_buffer;
  recv.size = kSize;
  recv.id = kTransfer;
  c_->Send(recv);
  Message record = Command(Cmd::kRecord);
  record.stream = victim.id;
  record.value = ++victim.value;
  c_->Send(record);

  // A session on the sending worker with bytes of its own, and a stream
  // that has failed (its send then carries the failure).
  struct Side {
    std::shared_ptr<Connection> c;
    uint64_t buffer = 0;
    uint64_t stream = 0;
  };
  auto open_side = [&](char fill) -> absl::StatusOr<Side> {
    Side side;
    FERRY_ASSIGN_OR_RETURN(side.c, Connection::Open(sender_hp, kTestToken));
    Message alloc = Command(Cmd::kAllocBuffer);
    alloc.size = kSize;
    FERRY_ASSIGN_OR_RETURN(Message a, side.c->Call(alloc));
    side.buffer = a.value;
    FERRY_ASSIGN_OR_RETURN(Message st,
                           side.c->Call(Command(Cmd::kCreateStream)));
    side.stream = st.value;
    Message memset = Command(Cmd::kMemset);
    memset.buffer = side.buffer;
    memset.size = kSize;
    memset.byte = static_cast<uint8_t>(fill);
    FERRY_RETURN_IF_ERROR(side.c->Call(memset).status());
    return side;
  };
  auto send = [&](Side& side, Capability cap) {
    Message m = Command(Cmd::kSendToPeer);
    m.stream = side.stream;
    m.buffer = side.buffer;
    m.size = kSize;
    m.text = worker_->address();
    m.value = c_->session();
    m.id = kTransfer;
    m.cap = cap;
    side.c->Send(std::move(m));
  };
  FERRY_ASSERT_OK_AND_ASSIGN(Side attacker, open_side('\x66'));
  // Guesses: no capability, and one off by a bit.
  Capability near = c_->capability();
  near[1] ^= 1;
  for (Capability guess : {Capability{0, 0}, near}) send(attacker, guess);
  // And a failure, from a stream that failed.
  Message launch = Command(Cmd::kLaunch);
  launch.stream = attacker.stream;
  launch.id = 999;
  attacker.c->Send(launch);
  send(attacker, Capability{0, 0});
  EXPECT_THAT(victim.timeline->WaitBlocking(
                  victim.value, absl::Now() + absl::Milliseconds(500)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  FERRY_EXPECT_OK(Ping());

  // The victim's own send, with its capability.
  FERRY_ASSERT_OK_AND_ASSIGN(Side own, open_side('\x11'));
  send(own, c_->capability());
  FERRY_ASSERT_OK(victim.timeline->WaitBlocking(
      victim.value, absl::Now() + absl::Seconds(10)));
  Stream g = NewStream();
  std::vector<char> got(kSize);
  Message get = Command(Cmd::kGetTensor);
  get.stream = g.id;
  get.buffer = victim_buffer;
  get.size = got.size();
  c_->Get(get, got.data(), g.value + 1);
  FERRY_ASSERT_OK(Finish(g));
  EXPECT_EQ(std::string(got.begin(), got.end()), std::string(kSize, '\x11'));
}

// kStats and kTraceSpans answer for the asking session alone: another
// session's bytes and buffers are not counted, its spans not returned.
TEST_F(RemoteSecurityTest, StatsAndTracesArePerSession) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto other, Connect());
  const std::vector<int64_t> before = WorkerCounters(*c_);
  Message alloc = Command(Cmd::kAllocBuffer);
  alloc.size = 1024;
  FERRY_ASSERT_OK_AND_ASSIGN(Message b, other->Call(alloc));
  FERRY_ASSERT_OK(other->Call(alloc).status());
  EXPECT_EQ(WorkerCounters(*other).at(5), 2);  // Its buffers.
  EXPECT_EQ(WorkerCounters(*c_).at(5), before.at(5));
  // The other session traces a graph with a telling name.
  Message trace = Command(Cmd::kTrace);
  trace.value = 1;
  other->Send(trace);
  c_->Send(trace);
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x, ctx.NewTensor(DType::kF32, {64}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx, x, 2.0f));
  y->name = "secret_op_name";
  Tensor* nodes[] = {y};
  auto locate = [&](const Tensor& t) -> absl::StatusOr<WirePlace> {
    return WirePlace{b.value, &t == x ? 0u : 512u};
  };
  WireLocate ref = locate;
  x->data = reinterpret_cast<void*>(1);
  y->data = reinterpret_cast<void*>(1);
  FERRY_ASSERT_OK_AND_ASSIGN(std::string blob, EncodeNodes(nodes, &ref));
  Message define = Command(Cmd::kDefineGraph);
  define.blob = blob;
  FERRY_ASSERT_OK_AND_ASSIGN(Message graph, other->Call(define));
  FERRY_ASSERT_OK_AND_ASSIGN(Message stream,
                             other->Call(Command(Cmd::kCreateStream)));
  auto timeline = std::make_shared<TimelineSemaphore>(0);
  other->AddStream(stream.value, timeline);
  Message launch = Command(Cmd::kLaunch);
  launch.stream = stream.value;
  launch.id = graph.value;
  other->Send(launch);
  Message record = Command(Cmd::kRecord);
  record.stream = stream.value;
  record.value = 1;
  other->Send(record);
  FERRY_ASSERT_OK(timeline->WaitBlocking(1, absl::Now() + absl::Seconds(10)));
  auto spans = [](Connection& c) {
    absl::StatusOr<Message> r = c.Call(Command(Cmd::kTraceSpans));
    EXPECT_TRUE(r.ok()) << r.status();
    absl::StatusOr<std::vector<WireSpan>> s =
        r.ok() ? DecodeTraceSpans(r->blob)
               : absl::StatusOr<std::vector<WireSpan>>(r.status());
    std::string names;
    if (s.ok()) {
      for (const WireSpan& w : *s) absl::StrAppend(&names, w.name, ";");
    }
    return names;
  };
  EXPECT_THAT(spans(*other), HasSubstr("secret_op_name"));
  EXPECT_THAT(spans(*c_), Not(HasSubstr("secret_op_name")));
}

TEST_F(RemoteSecurityTest, MalformedHeadersGetAnErrorAndTheWorkerLives) {
  // Random bytes, a truncated header, a wrong field mask: the worker
  // answers with an error (the client reports it) and keeps serving others.
  FERRY_ASSERT_OK_AND_ASSIGN(auto other, Connect());
  for (std::string header :
       {std::string("\x05\x01", 2), std::string(300, '\xee'),
        std::string("\x07\xff\xff\xff\xff", 5), std::string()}) {
    c_->SendRawForTesting(header);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (c_->alive() && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_THAT(c_->status(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("refused")));
  FERRY_EXPECT_OK(other->Call(Command(Cmd::kPing)).status());
}

TEST_F(RemoteSecurityTest, FilesLoadOnlyFromTheWeightsDirectory) {
  FERRY_ASSERT_OK_AND_ASSIGN(uint64_t buffer, Alloc(4096));
  Stream s = NewStream();
  auto load = [&](std::string path, uint64_t file_offset, uint64_t size) {
    Message m = Command(Cmd::kLoadFile);
    m.stream = s.id;
    m.buffer = buffer;
    m.offset = 0;
    m.size = size;
    m.text = std::move(path);
    m.value = file_offset;
    c_->Send(std::move(m));
    absl::Status status = Finish(s);
    if (!status.ok()) {
      Message reset = Command(Cmd::kResetStream);
      reset.stream = s.id;
      EXPECT_TRUE(c_->Call(reset).ok());
      s.timeline = std::make_shared<TimelineSemaphore>(s.value);
      c_->ResetStream(s.id, s.timeline, s.value);
    }
    return status;
  };
  FERRY_EXPECT_OK(load("weights.bin", 0, 4096));
  EXPECT_THAT(load("../weights.bin", 0, 16),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(load(dir_ + "/weights.bin", 0, 16),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(load("weights.bin", 4000, 200),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(load("missing.bin", 0, 16),
              StatusIs(absl::StatusCode::kNotFound));
  // The bytes that did load are the file's.
  Stream g = NewStream();
  std::vector<char> got(4096);
  Message get = Command(Cmd::kGetTensor);
  get.stream = g.id;
  get.buffer = buffer;
  get.offset = 0;
  get.size = got.size();
  c_->Get(get, got.data(), g.value + 1);
  FERRY_ASSERT_OK(Finish(g));
  EXPECT_EQ(std::string(got.begin(), got.end()), std::string(4096, '\x2a'));
}

// What runs for every open connection at exit: waiters get Unavailable at
// once, later work is refused without touching UCX, and the worker serves
// its other clients.
TEST_F(RemoteSecurityTest, AConnectionClosedForExitRefusesWork) {
  FERRY_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Connection> other, Connect());
  FERRY_ASSERT_OK(other->Call(Command(Cmd::kPing)).status());
  auto timeline = std::make_shared<TimelineSemaphore>(0);
  Message stream = Command(Cmd::kCreateStream);
  FERRY_ASSERT_OK_AND_ASSIGN(Message created, other->Call(stream));
  other->AddStream(created.value, timeline);
  other->CloseForExit();
  EXPECT_THAT(timeline->WaitBlocking(1, absl::Now() + absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("exiting")));
  const absl::Time start = absl::Now();
  EXPECT_THAT(other->Call(Command(Cmd::kPing), absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  Message record = Command(Cmd::kRecord);
  record.stream = created.value;
  record.value = 1;
  other->Send(std::move(record));  // Dropped, not sent.
  other->CloseForExit();           // Twice is harmless.
  other.reset();
  FERRY_EXPECT_OK(Ping());
}

// The worker's counters (WorkerStats, in order) as `c` gets them.
std::vector<int64_t> WorkerCounters(Connection& c) {
  absl::StatusOr<Message> r = c.Call(Command(Cmd::kStats));
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<int64_t> out;
  if (!r.ok()) return out;
  for (absl::string_view p : absl::StrSplit(r->text, ',')) {
    int64_t v = 0;
    EXPECT_TRUE(absl::SimpleAtoi(p, &v));
    out.push_back(v);
  }
  return out;
}

TEST_F(RemoteSecurityTest, AClientThatGoesAwayLeavesNothingBehind) {
  auto stats = [&] { return WorkerCounters(*c_); };
  const std::vector<int64_t> before = stats();
  {
    FERRY_ASSERT_OK_AND_ASSIGN(auto gone, Connect());
    for (int i = 0; i < 3; ++i) {
      Message m = Command(Cmd::kAllocBuffer);
      m.device = 1;
      m.size = 1 << 20;
      FERRY_ASSERT_OK(gone->Call(std::move(m)).status());
    }
    Message m = Command(Cmd::kCreateStream);
    m.device = 1;
    FERRY_ASSERT_OK(gone->Call(std::move(m)).status());
    EXPECT_EQ(WorkerCounters(*gone).at(5), 3);   // Its buffers.
    EXPECT_EQ(stats().at(5), before.at(5));      // Not this session's.
    EXPECT_EQ(stats().at(4), before.at(4) + 1);  // Sessions.
  }  // The connection drops without freeing anything.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<int64_t> after = stats();
  while ((after.at(5) != before.at(5) || after.at(4) != before.at(4)) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    after = stats();
  }
  EXPECT_EQ(after.at(5), before.at(5));
  EXPECT_EQ(after.at(4), before.at(4));
}

TEST_F(RemoteSecurityTest, AWorkerRefusesTimingsOutOfRange) {
  // A timeout under the clients' ping period would drop live clients.
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--client_timeout_ms=500"},
        {"--idle_spin_us=-1"},
        {"--idle_spin_us=2000000"},
        {"--client_timeout_ms=soon"}}) {
    args.push_back("--devices=cpu");
    EXPECT_THAT(
        WorkerProcess::Start(args),
        StatusIs(absl::StatusCode::kUnavailable, HasSubstr("did not start")))
        << args[0];
  }
}

TEST_F(RemoteSecurityTest, AClientThatFallsSilentIsDroppedAfterItsTimeout) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto worker,
      WorkerProcess::Start({"--devices=cpu", "--client_timeout_ms=2000"}));
  FERRY_ASSERT_OK_AND_ASSIGN(HostPort hp, ParseHostPort(worker->address()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto watcher, Connection::Open(hp, kTestToken));
  constexpr size_t kSessions = 4;
  const int64_t before = WorkerCounters(*watcher).at(kSessions);
  FERRY_ASSERT_OK_AND_ASSIGN(auto silent, Connection::Open(hp, kTestToken));
  Message alloc = Command(Cmd::kAllocBuffer);
  alloc.size = 1 << 20;
  FERRY_ASSERT_OK(silent->Call(std::move(alloc)).status());
  EXPECT_EQ(WorkerCounters(*watcher).at(kSessions), before + 1);
  // Its process hangs: no goodbye, no pings, the endpoint left open.
  const absl::Time hung = absl::Now();
  silent->AbandonForTesting();
  int64_t sessions = before + 1;
  while (sessions != before && absl::Now() < hung + absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(50));
    sessions = WorkerCounters(*watcher).at(kSessions);
  }
  EXPECT_EQ(sessions, before);
  EXPECT_GE(absl::Now() - hung, absl::Milliseconds(1500));  // Not at once.
  // An idle client pings: three seconds of quiet do not cost its session.
  absl::SleepFor(absl::Seconds(3));
  FERRY_EXPECT_OK(watcher->Call(Command(Cmd::kPing)).status());
  EXPECT_EQ(WorkerCounters(*watcher).at(kSessions), before);
}

// The token: 16 bytes at least, from a file only its owner can read.
TEST_F(RemoteSecurityTest, AWorkerRefusesWeakTokensAndOpenTokenFiles) {
  EXPECT_THAT(WorkerProcess::Start({"--devices=cpu", "--token=short"}),
              StatusIs(absl::StatusCode::kUnavailable));
  const std::string file = dir_ + "/token";
  std::ofstream(file) << kTestToken << "\n";
  chmod(file.c_str(), 0644);
  EXPECT_THAT(WorkerProcess::Start(
                  {"--devices=cpu", "--token=x", "--token_file=" + file}),
              StatusIs(absl::StatusCode::kUnavailable));
  chmod(file.c_str(), 0600);
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto worker, WorkerProcess::Start(
                       {"--devices=cpu", "--token=x", "--token_file=" + file}));
  FERRY_ASSERT_OK_AND_ASSIGN(HostPort hp, ParseHostPort(worker->address()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto c, Connection::Open(hp, kTestToken));
  FERRY_EXPECT_OK(c->Call(Command(Cmd::kPing)).status());
}

// Wrong tokens from one address: after a few, that address is refused for a
// while, even with the right token.
TEST_F(RemoteSecurityTest, WrongTokensAreRateLimited) {
  for (int i = 0; i < 5; ++i) {
    EXPECT_THAT(Connect("a-wrong-token-guess"),
                StatusIs(absl::StatusCode::kUnavailable));
  }
  EXPECT_THAT(Connect(), Not(::ferry::testing::IsOk()));
  FERRY_EXPECT_OK(Ping());  // A session that is open keeps working.
}

// A worker sends tensors, and with them its token, only to --peers.
TEST_F(RemoteSecurityTest, SendsGoOnlyToConfiguredPeers) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto sender,
      WorkerProcess::Start({"--devices=cpu", "--peers=10.255.255.1"}));
  FERRY_ASSERT_OK_AND_ASSIGN(HostPort hp, ParseHostPort(sender->address()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto c, Connection::Open(hp, kTestToken));
  Message alloc = Command(Cmd::kAllocBuffer);
  alloc.size = 256;
  FERRY_ASSERT_OK_AND_ASSIGN(Message buffer, c->Call(alloc));
  FERRY_ASSERT_OK_AND_ASSIGN(Message stream,
                             c->Call(Command(Cmd::kCreateStream)));
  auto timeline = std::make_shared<TimelineSemaphore>(0);
  c->AddStream(stream.value, timeline);
  Message send = Command(Cmd::kSendToPeer);
  send.stream = stream.value;
  send.buffer = buffer.value;
  send.size = 256;
  send.text = worker_->address();
  send.value = c_->session();
  send.id = 1;
  send.cap = c_->capability();
  c->Send(send);
  Message record = Command(Cmd::kRecord);
  record.stream = stream.value;
  record.value = 1;
  c->Send(record);
  EXPECT_THAT(
      timeline->WaitBlocking(1, absl::Now() + absl::Seconds(10)),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("--peers")));
}

TEST_F(RemoteSecurityTest, QuotasRefuseWithResourceExhausted) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto worker,
      WorkerProcess::Start(
          {"--devices=cpu", "--max_sessions=2", "--max_session_bytes=1048576",
           "--max_worker_bytes=1572864", "--max_session_streams=2",
           "--max_session_threads=5"}));
  FERRY_ASSERT_OK_AND_ASSIGN(HostPort hp, ParseHostPort(worker->address()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, Connection::Open(hp, kTestToken));
  auto alloc = [](Connection& c, uint64_t size) {
    Message m = Command(Cmd::kAllocBuffer);
    m.size = size;
    return c.Call(std::move(m)).status();
  };
  auto stream = [](Connection& c, std::string params) {
    Message m = Command(Cmd::kCreateStream);
    m.text = std::move(params);
    return c.Call(std::move(m)).status();
  };
  {
    FERRY_ASSERT_OK_AND_ASSIGN(auto gone, Connection::Open(hp, kTestToken));
    FERRY_EXPECT_OK(alloc(*gone, 1 << 20));
    EXPECT_THAT(alloc(*gone, 64),
                StatusIs(absl::StatusCode::kResourceExhausted));
    // The worker's bytes: the other session gets what is left.
    EXPECT_THAT(alloc(*a, 1 << 20),
                StatusIs(absl::StatusCode::kResourceExhausted));
    FERRY_EXPECT_OK(stream(*gone, "threads=1"));
    EXPECT_THAT(
        stream(*gone, "threads=8"),
        StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("threads")));
    FERRY_EXPECT_OK(stream(*gone, "threads=1"));
    EXPECT_THAT(
        stream(*gone, "threads=1"),
        StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("streams")));
    EXPECT_THAT(
        Connection::Open(hp, kTestToken),
        StatusIs(absl::StatusCode::kUnavailable, HasSubstr("sessions")));
  }  // Gone without freeing: what it held is the worker's again.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::Status again = alloc(*a, 1 << 20);
  while (!again.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    again = alloc(*a, 1 << 20);
  }
  FERRY_EXPECT_OK(again);
}

// A worker killed and started again on its port binds it at once, though
// its connections linger (TIME_WAIT).
TEST_F(RemoteSecurityTest, ARestartedWorkerBindsItsPortAtOnce) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto worker,
                             WorkerProcess::Start({"--devices=cpu"}));
  const int port = worker->port();
  FERRY_ASSERT_OK_AND_ASSIGN(HostPort hp, ParseHostPort(worker->address()));
  std::vector<std::shared_ptr<Connection>> clients;
  for (int i = 0; i < 3; ++i) {
    FERRY_ASSERT_OK_AND_ASSIGN(auto c, Connection::Open(hp, kTestToken));
    FERRY_ASSERT_OK(c->Call(Command(Cmd::kPing)).status());
    clients.push_back(c);
  }
  worker->Kill();
  // Its clients still hold their ends of the old connections.
  absl::SleepFor(absl::Milliseconds(200));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto again,
      WorkerProcess::Start(
          {"--devices=cpu", absl::StrCat("--listen=127.0.0.1:", port)}));
  EXPECT_EQ(again->port(), port);
  FERRY_ASSERT_OK_AND_ASSIGN(auto c, Connection::Open(hp, kTestToken));
  FERRY_EXPECT_OK(c->Call(Command(Cmd::kPing)).status());
}

}  // namespace
}  // namespace ferry::remote
