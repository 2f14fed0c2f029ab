// The fake CUDA runtime behaves as CUDA documents the calls ferry makes:
// devices and contexts, the per-thread last error and sticky errors,
// streams and the legacy default stream, events, cudaMemcpy's pageable and
// pinned semantics, host registration, peer access, kernel launches, and
// its own checks (guarded device memory, the race check, fault injection).
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ferry/backends/cuda/testing/fake_cuda_control.h"
#include "ferry/backends/cuda/testing/test_kernels.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::fake_cuda {
namespace {

using ::testing::HasSubstr;

// Device 1 is kept free of sticky errors (device 0 gets them).
class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    SetRaceMode(RaceMode::kRecord);
    SetCopyLatency(absl::ZeroDuration());
  }
  void TearDown() override {
    EXPECT_TRUE(TakeRaceReports().empty());
    SetRaceMode(RaceMode::kAbort);
    SetCopyLatency(absl::ZeroDuration());
    ClearFaults();
    (void)cudaGetLastError();
  }

  static bool StreamIdleForTest(cudaStream_t s) {
    const bool idle = cudaStreamQuery(s) == cudaSuccess;
    (void)cudaGetLastError();
    return idle;
  }

  void* Malloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    return p;
  }
  cudaStream_t NonBlocking() {
    cudaStream_t s = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
              cudaSuccess);
    return s;
  }
};

TEST_F(FakeCudaTest, DevicesAndVersions) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 2);
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 1), cudaSuccess);
  EXPECT_EQ(prop.totalGlobalMem, CurrentConfig().memory_bytes);
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // Read once, then cleared.
  int driver = 0, runtime = 0;
  EXPECT_EQ(cudaDriverGetVersion(&driver), cudaSuccess);
  EXPECT_EQ(cudaRuntimeGetVersion(&runtime), cudaSuccess);
  EXPECT_EQ(driver, kRuntimeVersion);
  EXPECT_EQ(runtime, kRuntimeVersion);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorIllegalAddress),
               "cudaErrorIllegalAddress");
}

TEST_F(FakeCudaTest, DeviceMemoryIsPoisonedAndTheHostCannotTouchIt) {
  auto* p = static_cast<float*>(Malloc(64));
  float host[16];
  ASSERT_EQ(cudaMemcpy(host, p, sizeof(host), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (float v : host) EXPECT_TRUE(std::isnan(v));  // Never written.
  EXPECT_DEATH(p[3] = 1.0f, "");
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(FakeCudaTest, FreedPointersAreRecognised) {
  void* p = Malloc(256);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  char host[16] = {};
  EXPECT_EQ(cudaMemcpy(p, host, sizeof(host), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
}

TEST_F(FakeCudaTest, MemcpyKindMustMatchThePointers) {
  void* d = Malloc(64);
  char host[64] = {};
  EXPECT_EQ(cudaMemcpy(d, host, 64, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, host, 65, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);  // Past the allocation's end.
  EXPECT_EQ(cudaMemcpy(d, host, 64, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

// A pageable upload with cudaMemcpy returns once its bytes are staged,
// with the DMA still in flight; a device-to-device cudaMemcpy does not
// wait at all; downloads wait.
TEST_F(FakeCudaTest, SynchronousCopiesFollowCudaHostSynchronization) {
  void* a = Malloc(4096);
  void* b = Malloc(4096);
  std::vector<char> host(4096, 7);
  SetCopyLatency(absl::Milliseconds(200));
  absl::Time start = absl::Now();
  ASSERT_EQ(cudaMemcpy(a, host.data(), 4096, cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(150));
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);
  (void)cudaGetLastError();
  std::fill(host.begin(), host.end(), 9);  // Staged: safe to reuse.
  ASSERT_EQ(cudaMemcpy(b, a, 4096, cudaMemcpyDeviceToDevice), cudaSuccess);
  std::vector<char> out(4096);
  start = absl::Now();
  ASSERT_EQ(cudaMemcpy(out.data(), b, 4096, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
  EXPECT_EQ(out, std::vector<char>(4096, 7));
  SetCopyLatency(absl::ZeroDuration());
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
}

// The legacy default stream waits for blocking streams and they for it;
// non-blocking streams wait for neither.
TEST_F(FakeCudaTest, LegacyStreamSynchronizesWithBlockingStreamsOnly) {
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  cudaStream_t free_running = NonBlocking();
  std::shared_ptr<Gate> gate = HoldStream(blocking);
  ASSERT_NE(gate, nullptr);
  void* d = Malloc(64);
  ASSERT_EQ(cudaMemsetAsync(d, 1, 64, nullptr), cudaSuccess);  // Legacy.
  ASSERT_EQ(cudaMemsetAsync(d, 2, 64, free_running), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(free_running), cudaSuccess);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);  // Behind the gate.
  (void)cudaGetLastError();
  gate->Open();
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  // The two memsets were unordered: a race the fake reports.
  std::vector<std::string> reports = TakeRaceReports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_THAT(reports[0], HasSubstr("race on device memory"));
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(free_running), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(FakeCudaTest, EventsOrderStreamsAndQueriesRecordNotReady) {
  cudaStream_t first = NonBlocking();
  cudaStream_t second = NonBlocking();
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
            cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);  // Never recorded.
  void* d = Malloc(64);
  std::shared_ptr<Gate> gate = HoldStream(first);
  ASSERT_EQ(cudaMemsetAsync(d, 1, 64, first), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, first), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(second, event, 0), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 2, 64, second), cudaSuccess);  // Ordered.
  EXPECT_EQ(cudaEventQuery(event), cudaErrorNotReady);
  // Not ready is an error result: it stays as the thread's last error
  // until read.
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  gate->Open();
  EXPECT_EQ(cudaEventSynchronize(event), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(second), cudaSuccess);
  char out = 0;
  ASSERT_EQ(cudaMemcpy(&out, d, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out, 2);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(first), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(second), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(FakeCudaTest, EventsRecordOnlyOnTheirDevicesStreams) {
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);  // On device 1.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t on_zero = NonBlocking();
  EXPECT_EQ(cudaEventRecord(event, on_zero), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaStreamDestroy(on_zero), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

// cudaFree waits for the device; pinned memory unpinned or freed while a
// copy still uses it is a race the fake reports.
TEST_F(FakeCudaTest, FreesWaitOrReportWorkInFlight) {
  void* d = Malloc(64);
  cudaStream_t s = NonBlocking();
  std::shared_ptr<Gate> gate = HoldStream(s);
  ASSERT_EQ(cudaMemsetAsync(d, 1, 64, s), cudaSuccess);
  std::thread opener([&] {
    absl::SleepFor(absl::Milliseconds(50));
    gate->Open();
  });
  EXPECT_EQ(cudaFree(d), cudaSuccess);  // Waits for the device.
  opener.join();
  EXPECT_TRUE(StreamIdleForTest(s));

  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocPortable), cudaSuccess);
  d = Malloc(64);
  gate = HoldStream(s);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 64, cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  std::thread late_opener([&] {
    absl::SleepFor(absl::Milliseconds(50));
    gate->Open();
  });
  // Reported, then it waits for the copy (the report is all that happens).
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  late_opener.join();
  std::vector<std::string> reports = TakeRaceReports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_THAT(reports[0], HasSubstr("cudaFreeHost"));
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(FakeCudaTest, HostRegistrationRules) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* memory = mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  char* bytes = static_cast<char*>(memory);
  ASSERT_EQ(cudaHostRegister(bytes, page + 100, cudaHostRegisterPortable),
            cudaSuccess);
  // Registration is page-granular: the next range shares a page.
  EXPECT_EQ(cudaHostRegister(bytes + page + 200, 100, 0),
            cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaGetLastError(), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostUnregister(bytes + page), cudaErrorHostMemoryNotRegistered);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaHostUnregister(bytes), cudaSuccess);
  // Read-only pages need cudaHostRegisterReadOnly.
  ASSERT_EQ(mprotect(bytes + 2 * page, 2 * page, PROT_READ), 0);
  EXPECT_EQ(cudaHostRegister(bytes + 2 * page, page, 0), cudaErrorNotPermitted);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaHostRegister(bytes + 2 * page, page, cudaHostRegisterReadOnly),
            cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(bytes + 2 * page), cudaSuccess);
  munmap(memory, 4 * page);
}

TEST_F(FakeCudaTest, PeerAccess) {
  int can = 0;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 1, 0), cudaSuccess);
  EXPECT_EQ(can, 1);
  EXPECT_FALSE(PeerAccessEnabled(1, 0));
  ASSERT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);  // 1 -> 0.
  EXPECT_TRUE(PeerAccessEnabled(1, 0));
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0),
            cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessAlreadyEnabled);
}

TEST_F(FakeCudaTest, LaunchesRunEmulationsAndCheckConfigurations) {
  cudaStream_t s = NonBlocking();
  FERRY_EXPECT_OK(cuda_testing::LaunchEmptyKernel(s));
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const int64_t launches = GetStats().launches;
  FERRY_EXPECT_OK(cuda_testing::LaunchSpinKernel(s, 1000));
  EXPECT_EQ(GetStats().launches, launches + 1);
  int not_a_kernel = 0;
  void* no_args[] = {nullptr};
  EXPECT_EQ(cudaLaunchKernel(&not_a_kernel, dim3(1), dim3(32), no_args, 0, s),
            cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(cudaLaunchKernel(cuda_testing::EmptyKernelAddress(), dim3(1),
                             dim3(2048), no_args, 0, s),
            cudaErrorInvalidConfiguration);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST_F(FakeCudaTest, InjectedFaults) {
  InjectAllocationFailure(2);
  void* first = nullptr;
  void* second = nullptr;
  EXPECT_EQ(cudaMalloc(&first, 64), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&second, 64), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaFree(first), cudaSuccess);
  // Out of memory past the configured budget.
  void* huge = nullptr;
  EXPECT_EQ(cudaMalloc(&huge, CurrentConfig().memory_bytes + 1),
            cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  cudaStream_t s = NonBlocking();
  InjectNotReady(3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  (void)cudaGetLastError();
  // A launch fault that surfaces at the launch call, not sticky here.
  InjectLaunchFault(1, cudaErrorLaunchOutOfResources, FaultSurface::kAtLaunch);
  EXPECT_THAT(cuda_testing::LaunchEmptyKernel(s),
              testing::StatusIs(absl::StatusCode::kInternal,
                                HasSubstr("cudaErrorLaunchOutOfResources")));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // Read by the launcher.
  FERRY_EXPECT_OK(cuda_testing::LaunchEmptyKernel(s));
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Runs last (gtest runs tests in order): ruins device 0's context.
TEST_F(FakeCudaTest, ZStickyErrorsRuinTheDeviceForGood) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t s = NonBlocking();
  // The fault may already show at the launcher's cudaGetLastError.
  (void)cuda_testing::LaunchIllegalWriteKernel(s);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
  EXPECT_EQ(StickyError(0), cudaErrorIllegalAddress);
  // Every later call on the device returns it, and it is never cleared.
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorIllegalAddress);
  EXPECT_THAT(cuda_testing::LaunchEmptyKernel(s),
              testing::StatusIs(absl::StatusCode::kInternal));
  // Device 1 is unharmed.
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  ClearStickyError(0);
}

}  // namespace
}  // namespace ferry::fake_cuda
