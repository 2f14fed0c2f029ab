// The backend conformance suite: what every Backend must do, written once
// and run by every backend (IREE's CTS, PJRT's client tests).
//
// Suites by area, each a value-parameterized fixture:
//   BufferConformanceTest       buffers and transfers
//   EventConformanceTest        events, waits, where awaiters resume
//   FailureConformanceTest      failures, their reach, and recovery
//   ComputeConformanceTest      compute and every supported op
//   CaptureConformanceTest      backend.h's rule 1 (what EnqueueCompute reads
//                               when) and rule 2 (host memory lifetime)
//   MultiBackendConformanceTest ordering between backends
// Tests that need a capability (pinned host memory, device events) skip,
// saying so, where DeviceCaps says the device lacks it.
//
// A backend joins from its own test binary:
//
//   FERRY_INSTANTIATE_CONFORMANCE(Sim, ConformanceBackend{
//       .name = "sim",
//       .create = [] { return MySimDevice().CreateBackend(); },
//       .unsupported = {{"BufferConformanceTest.X", "why it never can"}},
//       .expected_failures = {{"EventConformanceTest.Y", "bug #12"}}});
//
// A factory answering Unavailable (no GPU) makes every test skip, visibly,
// with the reason (fail, for a backend required under --config=gpu). A test
// listed as unsupported skips with its reason. A test listed as an expected
// failure runs; its failures are reported as expected and the test passes, and
// if it stops failing the test fails so that the list is kept honest.
#ifndef FERRY_TESTS_CONFORMANCE_CONFORMANCE_H_
#define FERRY_TESTS_CONFORMANCE_CONFORMANCE_H_

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace ferry::testing {

struct ConformanceBackend {
  std::string name;  // Test-name suffix: letters, digits, '_'.
  // Makes a backend; Unavailable skips every test. Called once per test,
  // and again by tests that need a second backend of the same kind.
  std::function<absl::StatusOr<std::unique_ptr<Backend>>()> create;
  // "Suite.Test" -> why this backend can never run it.
  std::map<std::string, std::string> unsupported;
  // "Suite.Test" -> why it fails today (the bug to fix).
  std::map<std::string, std::string> expected_failures;
  // The backend a GPU machine must have (e.g. cuda0): under
  // FERRY_REQUIRE_GPU=1 (--config=gpu) a factory answering Unavailable
  // fails every test instead of skipping it, so a run that tested nothing
  // cannot pass.
  bool required_under_gpu_config = false;
};

inline void PrintTo(const ConformanceBackend& backend, std::ostream* os) {
  *os << backend.name;
}

inline std::string ConformanceBackendName(
    const ::testing::TestParamInfo<ConformanceBackend>& info) {
  return info.param.name;
}

class ConformanceTest : public ::testing::TestWithParam<ConformanceBackend> {
 protected:
  void SetUp() override;
  void TearDown() override;

  Backend& backend() { return *backend_; }
  Device& device() { return backend_->device(); }
  // Skips the test unless the device has pinned host memory / events.
  bool NeedsHostBuffer();

  // A new f32 tensor of `n` elements in its own buffer of `type` (the
  // fixture keeps the buffer).
  Tensor* NewTensorIn(BufferType& type, int64_t n, const char* name);
  // The same in the backend's own memory.
  Tensor* NewDeviceTensor(int64_t n, const char* name);
  // A tensor of another device's memory (a fake device's), which this
  // backend cannot use.
  Tensor* NewForeignTensor(int64_t n, const char* name);
  // Places every tensor of `graph` without memory in one buffer of `type`
  // (default: the backend's memory), which the fixture keeps.
  void Place(const Graph& graph, BufferType* type = nullptr);
  // Synchronous reads and writes of a whole f32 tensor.
  std::vector<float> Read(const Tensor& t);
  void Write(Tensor& t, const std::vector<float>& values);

  // Another backend like backend() (same factory), or a CPU backend.
  std::unique_ptr<Backend> SecondBackend();
  std::unique_ptr<Backend> CpuBackend();

  Context ctx_;
  // Declared before the backend: destroyed after its work has stopped.
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::unique_ptr<Backend> backend_;

 private:
  std::unique_ptr<::testing::ScopedFakeTestPartResultReporter> expected_;
  ::testing::TestPartResultArray expected_results_;
  std::string expected_reason_;
};

class BufferConformanceTest : public ConformanceTest {};
class EventConformanceTest : public ConformanceTest {};
class FailureConformanceTest : public ConformanceTest {};
class ComputeConformanceTest : public ConformanceTest {};
class CaptureConformanceTest : public ConformanceTest {};
class MultiBackendConformanceTest : public ConformanceTest {};

// An event a test completes or fails by hand, e.g. to hold a backend's
// later work (EnqueueWait(gate.event())) until Open(). Opens when it goes
// unless it failed. Thread-safe.
class ManualEvent {
 public:
  ManualEvent() = default;
  ~ManualEvent();
  ManualEvent(const ManualEvent&) = delete;
  ManualEvent& operator=(const ManualEvent&) = delete;

  Event event() const { return Event(semaphore_, 1); }
  void Open();
  void Fail(absl::Status status = absl::DataLossError("planted failure"));
  // Opens from another thread after `delay`.
  void OpenLater(absl::Duration delay);

 private:
  std::shared_ptr<TimelineSemaphore> semaphore_ =
      std::make_shared<TimelineSemaphore>(0);
  std::thread opener_;
};

// f32 values i * scale + offset, for recognisable data.
std::vector<float> Iota(int64_t n, float scale = 1.0f, float offset = 0.0f);

}  // namespace ferry::testing

// Runs every conformance suite for the given ConformanceBackend values. Use
// it inside namespace ferry::testing (gtest pastes the suite names).
#define FERRY_INSTANTIATE_CONFORMANCE(prefix, ...)              \
  INSTANTIATE_TEST_SUITE_P(prefix, BufferConformanceTest,       \
                           ::testing::Values(__VA_ARGS__),      \
                           ConformanceBackendName);             \
  INSTANTIATE_TEST_SUITE_P(prefix, EventConformanceTest,        \
                           ::testing::Values(__VA_ARGS__),      \
                           ConformanceBackendName);             \
  INSTANTIATE_TEST_SUITE_P(prefix, FailureConformanceTest,      \
                           ::testing::Values(__VA_ARGS__),      \
                           ConformanceBackendName);             \
  INSTANTIATE_TEST_SUITE_P(prefix, ComputeConformanceTest,      \
                           ::testing::Values(__VA_ARGS__),      \
                           ConformanceBackendName);             \
  INSTANTIATE_TEST_SUITE_P(prefix, CaptureConformanceTest,      \
                           ::testing::Values(__VA_ARGS__),      \
                           ConformanceBackendName);             \
  INSTANTIATE_TEST_SUITE_P(prefix, MultiBackendConformanceTest, \
                           ::testing::Values(__VA_ARGS__),      \
                           ConformanceBackendName)

#endif  // FERRY_TESTS_CONFORMANCE_CONFORMANCE_H_
