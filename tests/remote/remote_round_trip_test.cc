// Small round trips from several threads on one connection: each thread
// uploads its own bytes and reads them back, many times, while the others
// do the same. With FERRY_REMOTE_DRIVE_SPIN_US set, a thread sends its
// commands and receives the replies itself (UcxLoop::RunOrPost, Drive) when
// no other thread holds the loop; either way every download lands the bytes
// of its own upload, and nothing is lost, reordered or answered twice.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/remote/client/remote_device.h"
#include "ferry/backends/remote/testing/worker_process.h"
#include "ferry/graph/context.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using remote::testing::WorkerProcess;

constexpr int kThreads = 4;
constexpr int kRounds = 200;
constexpr int64_t kBytes = 4096;

struct Placed {
  Context ctx;
  std::vector<std::unique_ptr<Buffer>> buffers;
  absl::StatusOr<Tensor*> New(BufferType& type, int64_t bytes,
                              const std::string& name) {
    FERRY_ASSIGN_OR_RETURN(Tensor * t,
                           ctx.NewTensor(DType::kF32, {bytes / 4}, name));
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> b,
                           type.Allocate(static_cast<size_t>(bytes)));
    FERRY_RETURN_IF_ERROR(PlaceTensor(*b, *t, 0));
    buffers.push_back(std::move(b));
    return t;
  }
};

// `rounds` uploads of distinct bytes, each read back and checked.
void UploadAndReadBack(Device& device, int thread, int rounds) {
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      device.CreateBackend("threads=1");
  ASSERT_TRUE(backend.ok()) << backend.status();
  Placed p;
  const std::string tag = absl::StrCat("t", thread);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * remote,
                             p.New(*device.default_buffer_type(), kBytes, tag));
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * up, p.New(*device.host_buffer_type(), kBytes, tag + "_up"));
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * down, p.New(*device.host_buffer_type(), kBytes, tag + "_down"));
  auto* out = static_cast<uint32_t*>(up->data);
  auto* in = static_cast<uint32_t*>(down->data);
  for (int round = 0; round < rounds; ++round) {
    for (int64_t i = 0; i < kBytes / 4; ++i) {
      out[i] = static_cast<uint32_t>(thread << 24 | round << 12 | i);
    }
    std::memset(in, 0, kBytes);
    // Upload and download back to back: the download must follow the
    // upload whichever thread sends each (the loop's or this one).
    FERRY_ASSERT_OK((*backend)->EnqueueSetTensor(*remote, up->data, 0, kBytes));
    FERRY_ASSERT_OK(
        (*backend)->EnqueueGetTensor(*remote, down->data, 0, kBytes));
    FERRY_ASSERT_OK((*backend)->Synchronize());
    ASSERT_EQ(std::memcmp(in, out, kBytes), 0)
        << "thread " << thread << " round " << round;
  }
}

TEST(RemoteRoundTripTest, ThreadsSharingAConnectionEachGetTheirOwnBytes) {
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<WorkerProcess> worker,
                             WorkerProcess::Start({"--devices=cpu"}));
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Device> device,
                             MakeRemoteDevice(worker->address() + "/cpu"));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(
        [&device, t] { UploadAndReadBack(*device, t, kRounds); });
  }
  for (std::thread& t : threads) t.join();
}

TEST(RemoteRoundTripTest, BlockingCallsInterleaveWithRoundTrips) {
  // Buffer allocations are calls (a reply awaited by the caller) while
  // another thread's round trips hold or release the loop.
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<WorkerProcess> worker,
                             WorkerProcess::Start({"--devices=cpu"}));
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Device> device,
                             MakeRemoteDevice(worker->address() + "/cpu"));
  std::thread round_trips(
      [&device] { UploadAndReadBack(*device, 0, kRounds); });
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        device->default_buffer_type()->Allocate(kBytes);
    ASSERT_TRUE(b.ok()) << b.status();
  }
  round_trips.join();
}

// A download followed by Record is one message each way: the worker
// records the value itself after the get. That record is real on the
// worker: another backend there waits for it before overwriting the bytes,
// so the download still reads the first ones, and the event completes.
TEST(RemoteRoundTripTest, AnEventRecordedRightAfterADownloadOrdersTheWorker) {
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<WorkerProcess> worker,
                             WorkerProcess::Start({"--devices=cpu"}));
  FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Device> device,
                             MakeRemoteDevice(worker->address() + "/cpu"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto reader, device->CreateBackend("threads=1"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto writer, device->CreateBackend("threads=1"));
  Placed p;
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * remote, p.New(*device->default_buffer_type(), kBytes, "r"));
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * first, p.New(*device->host_buffer_type(), kBytes, "first"));
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * second, p.New(*device->host_buffer_type(), kBytes, "second"));
  FERRY_ASSERT_OK_AND_ASSIGN(
      Tensor * down, p.New(*device->host_buffer_type(), kBytes, "down"));
  std::memset(first->data, 0x11, kBytes);
  std::memset(second->data, 0x22, kBytes);
  FERRY_ASSERT_OK(SetTensorData(*remote, first->data));
  for (int round = 0; round < 20; ++round) {
    std::memset(down->data, 0, kBytes);
    FERRY_ASSERT_OK(reader->EnqueueGetTensor(*remote, down->data, 0, kBytes));
    const Event got = reader->Record();
    FERRY_ASSERT_OK(writer->EnqueueWait(got));
    FERRY_ASSERT_OK(writer->EnqueueSetTensor(*remote, second->data, 0, kBytes));
    FERRY_ASSERT_OK(writer->EnqueueSetTensor(*remote, first->data, 0, kBytes));
    FERRY_ASSERT_OK(got.WaitBlocking(absl::Now() + absl::Seconds(10)));
    FERRY_ASSERT_OK(writer->Synchronize());
    ASSERT_EQ(std::memcmp(down->data, first->data, kBytes), 0)
        << "round " << round;
  }
}

}  // namespace
}  // namespace ferry
