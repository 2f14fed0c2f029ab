// A fuzzer over command sequences against a live worker in this process:
// each input is a sequence of commands on a fresh session (after a few
// streams and buffers): mostly stream work that chains (records and waits
// between its streams, repeated as a client's loop would, gates held), and
// commands of every kind, their fields drawn from values that matter (ids
// the worker gave out, now and then ids it did not, zero, huge, ranges at
// and past buffer ends), now and then a malformed one. After each input,
// invariants that must hold whatever a token holder sends:
//   - another session answers a ping within 100 ms (best of three pings,
//     which absorbs scheduling noise on a loaded machine);
//   - that session's buffer still holds its bytes (nothing crossed over);
//   - the process's descriptors and memory stay bounded.
// It runs for FERRY_FUZZ_SECONDS (default 10) from seed FERRY_FUZZ_SEED
// (default: the time), and prints the seed, so a failure can be replayed.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ferry/backends/linked/linked_devices.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/remote/client/connection.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/transport/address.h"
#include "ferry/backends/remote/worker/worker_server.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "gtest/gtest.h"

namespace ferry::remote {
namespace {

constexpr char kToken[] = "session-fuzzer-token";

Message Command(Cmd cmd) {
  Message m;
  m.kind = static_cast<uint8_t>(cmd);
  return m;
}

int OpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  int64_t out = 0;
  return v != nullptr && absl::SimpleAtoi(v, &out) ? out : fallback;
}

// One input: a sequence of commands on a fresh session.
class Input {
 public:
  Input(uint64_t seed, Connection& c) : rng_(seed), c_(c) {}

  // A command with a bad id, or a malformed one, ends the session (the
  // client takes the worker's refusal as fatal): streams and buffers are
  // made first, so that most inputs go deep.
  void Run(int commands) {
    for (int i = 0; i < 3; ++i) {
      Message stream = Command(Cmd::kCreateStream);
      stream.text = "threads=1";
      absl::StatusOr<Message> r = c_.Call(stream, absl::Seconds(5));
      if (r.ok()) streams_.push_back(r->value);
    }
    for (uint64_t size : {256, 4096}) {
      Message alloc = Command(Cmd::kAllocBuffer);
      alloc.size = size;
      absl::StatusOr<Message> r = c_.Call(alloc, absl::Seconds(5));
      if (r.ok()) buffers_.push_back(r->value);
    }
    ids_ = streams_;
    ids_.insert(ids_.end(), buffers_.begin(), buffers_.end());
    for (int i = 0; i < commands && c_.alive(); ++i, ++sent_) One();
  }
  int sent() const { return sent_; }

 private:
  uint64_t Pick(std::initializer_list<uint64_t> values) {
    std::uniform_int_distribution<size_t> d(0, values.size() - 1);
    return *(values.begin() + d(rng_));
  }
  bool Coin(int one_in) {
    return std::uniform_int_distribution<int>(0, one_in - 1)(rng_) == 0;
  }
  // An id the worker gave out (of the kind wanted, mostly), or one it did
  // not.
  uint64_t Id(const std::vector<uint64_t>& wanted) {
    const std::vector<uint64_t>& from = Coin(32) ? ids_ : wanted;
    if (!from.empty() && !Coin(32)) {
      return from[std::uniform_int_distribution<size_t>(0,
                                                        from.size() - 1)(rng_)];
    }
    return Pick({0, 1, 2, 3, 5, 100, ~uint64_t{0}});
  }
  // Mostly stream work that chains (records, waits, gates), which is where
  // the worker keeps state per command; every kind now and then.
  Cmd PickCmd() {
    const int r = std::uniform_int_distribution<int>(0, 99)(rng_);
    if (r < 25) return Cmd::kRecord;
    if (r < 50) return Cmd::kWaitStream;
    if (r < 60) return Cmd::kWaitGate;
    if (r < 65) return Cmd::kCreateStream;
    if (r < 70) return Cmd::kAllocBuffer;
    if (r < 75) return Cmd::kSetTensor;
    if (r < 80) return Cmd::kGetTensor;
    if (r < 85) return Cmd::kPing;
    return static_cast<Cmd>(std::uniform_int_distribution<int>(
        1, static_cast<int>(Cmd::kLast))(rng_));
  }
  uint64_t Size() {
    return Pick({0, 1, 4, 64, 256, 4096, 65536, 1 << 20, ~uint64_t{0} - 7});
  }
  uint64_t Offset() { return Pick({0, 4, 60, 192, 4096, ~uint64_t{0} - 3}); }

  // A record on one stream and a wait on it by another (or itself), as a
  // client chains streams; the worker keeps what each record covers.
  void Chain() {
    const uint64_t src = streams_[std::uniform_int_distribution<size_t>(
        0, streams_.size() - 1)(rng_)];
    const uint64_t dst = streams_[std::uniform_int_distribution<size_t>(
        0, streams_.size() - 1)(rng_)];
    // Repeated, as a client's loop would.
    const uint64_t rounds = Pick({1, 2, 8, 40});
    for (uint64_t i = 0; i < rounds; ++i) {
      Message record = Command(Cmd::kRecord);
      record.stream = src;
      record.value = ++last_[src];
      c_.Send(record);
      Message wait = Command(Cmd::kWaitStream);
      wait.stream = dst;
      wait.src_stream = src;
      wait.value = last_[src];
      c_.Send(wait);
    }
  }

  void One() {
    if (!streams_.empty() && Coin(3)) {
      Chain();
      return;
    }
    const Cmd cmd = PickCmd();
    Message m = Command(cmd);
    const uint32_t fields = CommandFields(cmd);
    if (fields & kFStream) m.stream = Id(streams_);
    if (fields & kFSrcStream) m.src_stream = Id(streams_);
    if (fields & kFBuffer) m.buffer = Id(buffers_);
    if (fields & kFSrcBuffer) m.src_buffer = Id(buffers_);
    if (fields & kFOffset) m.offset = Offset();
    if (fields & kFSrcOffset) m.src_offset = Offset();
    if (fields & kFSize) m.size = Size();
    if (fields & kFValue) m.value = Pick({0, 1, 2, 3, 300, ~uint64_t{0}});
    if (fields & kFId) m.id = Id(ids_);
    if (cmd == Cmd::kRecord && !Coin(8)) m.value = ++last_[m.stream];
    if (cmd == Cmd::kWaitStream && !Coin(8)) m.value = last_[m.src_stream];
    if (cmd == Cmd::kWaitGate || cmd == Cmd::kSignalGate) {
      m.id = ++gates_;  // Held: nothing signals them.
    }
    if (fields & kFDevice) m.device = static_cast<uint32_t>(Pick({0, 1, 7}));
    if (fields & kFByte) m.byte = static_cast<uint8_t>(Pick({0, 1, 2}));
    if (fields & kFCode) m.code = static_cast<uint32_t>(Pick({0, 2, 10}));
    if (cmd == Cmd::kCreateStream) {
      m.text = Coin(2) ? "threads=1" : (Coin(2) ? "threads=2000" : "junk");
    } else if (cmd == Cmd::kLoadFile) {
      m.text =
          Pick({0, 1, 2}) == 0 ? "w.bin" : (Coin(2) ? "../etc/passwd" : "fifo");
    } else if (cmd == Cmd::kSendToPeer) {
      m.text = Coin(2) ? "127.0.0.1:1" : "10.255.255.1:7000";
    } else if (fields & kFText) {
      m.text = "fuzz";
    }
    if (fields & kFBlob) m.blob = std::string(Pick({0, 3, 40}), '\x01');
    if (cmd == Cmd::kAllocBuffer) m.size = Pick({0, 64, 4096, 1 << 20});
    if (Coin(200)) {
      // Malformed: the session may end here.
      std::string header = EncodeCommand(m);
      header.resize(header.size() / 2);
      c_.SendRawForTesting(std::move(header));
      return;
    }
    if (fields & kFReq) {
      // Answers the fuzzer wants (ids) come back; the rest are not waited
      // for, but each Call is bounded.
      if (cmd == Cmd::kAllocBuffer || cmd == Cmd::kCreateStream ||
          cmd == Cmd::kDefineGraph) {
        absl::StatusOr<Message> r = c_.Call(m, absl::Seconds(5));
        if (r.ok()) {
          ids_.push_back(r->value);
          if (cmd == Cmd::kAllocBuffer) buffers_.push_back(r->value);
          if (cmd == Cmd::kCreateStream) streams_.push_back(r->value);
        }
        return;
      }
      c_.Send(std::move(m));
      return;
    }
    if (cmd == Cmd::kSetTensor && m.size <= 65536 && Coin(2)) {
      auto bytes = std::make_shared<std::string>(m.size, '\x5a');
      c_.Send(std::move(m), bytes->data(), bytes->size(),
              [bytes](absl::Status) {});
      return;
    }
    c_.Send(std::move(m));
  }

  std::mt19937_64 rng_;
  Connection& c_;
  std::vector<uint64_t> ids_, buffers_, streams_;
  // The last value recorded on each stream (they increase, as a
  // client's do).
  std::map<uint64_t, uint64_t> last_;
  int sent_ = 0;
  uint64_t gates_ = 0;
};

TEST(RemoteSessionFuzzerTest, InvariantsHoldAfterEveryInput) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  std::ofstream(dir + "/w.bin") << std::string(8192, 'w');
  mkfifo((dir + "/fifo").c_str(), 0600);
  Registry registry;
  FERRY_ASSERT_OK(RegisterLinkedDevices(registry));
  FERRY_ASSERT_OK_AND_ASSIGN(BackendList list,
                             registry.CreateBackends("cpu,sim0", {}));
  WorkerOptions options;
  options.host = "127.0.0.1";
  options.token = kToken;
  options.weights_dir = dir;
  options.peers = {"127.0.0.1"};
  options.transfer_timeout = absl::Seconds(2);
  options.quotas.max_session_bytes = 64 << 20;
  options.quotas.max_session_threads = 16;
  for (Backend* b : list.backends) options.devices.push_back(&b->device());
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<WorkerServer> server,
                             WorkerServer::Create(std::move(options)));
  std::thread serving([&] { server->Run(); });
  const HostPort hp{"127.0.0.1", server->port()};

  // The bystander: a session with bytes of its own.
  FERRY_ASSERT_OK_AND_ASSIGN(auto bystander, Connection::Open(hp, kToken));
  Message alloc = Command(Cmd::kAllocBuffer);
  alloc.size = 256;
  FERRY_ASSERT_OK_AND_ASSIGN(Message buffer, bystander->Call(alloc));
  Message memset = Command(Cmd::kMemset);
  memset.buffer = buffer.value;
  memset.size = 256;
  memset.byte = 0x33;
  FERRY_ASSERT_OK(bystander->Call(memset).status());
  FERRY_ASSERT_OK_AND_ASSIGN(Message stream,
                             bystander->Call(Command(Cmd::kCreateStream)));
  auto timeline = std::make_shared<TimelineSemaphore>(0);
  bystander->AddStream(stream.value, timeline);
  uint64_t tag = 0;

  const uint64_t seed = static_cast<uint64_t>(
      EnvInt("FERRY_FUZZ_SEED", absl::ToUnixNanos(absl::Now())));
  const absl::Duration budget = absl::Seconds(EnvInt("FERRY_FUZZ_SECONDS", 10));
  std::printf("remote session fuzzer: seed %llu\n",
              static_cast<unsigned long long>(seed));
  const int fds_before = OpenFds();
  const int64_t rss_before = RssBytes();
  const absl::Time end = absl::Now() + budget;
  int inputs = 0;
  int64_t commands = 0;
  for (; absl::Now() < end; ++inputs) {
    const uint64_t input_seed = seed + static_cast<uint64_t>(inputs);
    {
      absl::StatusOr<std::shared_ptr<Connection>> fuzz =
          Connection::Open(hp, kToken);
      ASSERT_TRUE(fuzz.ok()) << fuzz.status() << " input seed " << input_seed;
      Input input(input_seed, **fuzz);
      input.Run(100);
      commands += input.sent();
      // Its commands are through (or its session ended).
      (void)(*fuzz)->Call(Command(Cmd::kPing), absl::Seconds(5));
    }
    absl::Duration best = absl::InfiniteDuration();
    for (int i = 0; i < 3; ++i) {
      const absl::Time start = absl::Now();
      absl::Status ping =
          bystander->Call(Command(Cmd::kPing), absl::Seconds(5)).status();
      ASSERT_TRUE(ping.ok()) << ping << " input seed " << input_seed;
      best = std::min(best, absl::Now() - start);
    }
    EXPECT_LT(best, absl::Milliseconds(100)) << "input seed " << input_seed;
    std::string got(256, '\0');
    Message get = Command(Cmd::kGetTensor);
    get.stream = stream.value;
    get.buffer = buffer.value;
    get.size = got.size();
    bystander->Get(get, got.data(), tag + 1);
    Message record = Command(Cmd::kRecord);
    record.stream = stream.value;
    record.value = ++tag;
    bystander->Send(record);
    ASSERT_TRUE(
        timeline->WaitBlocking(tag, absl::Now() + absl::Seconds(5)).ok())
        << "input seed " << input_seed;
    ASSERT_EQ(got, std::string(256, '\x33')) << "input seed " << input_seed;
    ASSERT_LT(OpenFds(), fds_before + 64) << "input seed " << input_seed;
    ASSERT_LT(RssBytes(), rss_before + (int64_t{1} << 30))
        << "input seed " << input_seed;
  }
  std::printf("remote session fuzzer: %lld steps before sessions ended\n",
              static_cast<long long>(commands));
  std::printf(
      "remote session fuzzer: %d inputs, fds %d -> %d, rss %lld -> "
      "%lld MiB\n",
      inputs, fds_before, OpenFds(), static_cast<long long>(rss_before >> 20),
      static_cast<long long>(RssBytes() >> 20));
  EXPECT_GT(inputs, 0);
  bystander.reset();
  server->Stop();
  serving.join();
}

}  // namespace
}  // namespace ferry::remote
