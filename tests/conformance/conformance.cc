#include "ferry/tests/conformance/conformance.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/testing/fake_device.h"
#include "ferry/runtime/status_matchers.h"

namespace ferry::testing {
namespace {

// FERRY_REQUIRE_GPU=1: set by --config=gpu (.bazelrc) for tests.
bool GpuRequired() {
  const char* value = std::getenv("FERRY_REQUIRE_GPU");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// "Prefix/BufferConformanceTest" + "SetGet/cpu" ->
// "BufferConformanceTest.SetGet".
std::string CurrentTestKey() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::string suite = info->test_suite_name();
  std::string name = info->name();
  if (size_t slash = suite.rfind('/'); slash != std::string::npos) {
    suite = suite.substr(slash + 1);
  }
  if (size_t slash = name.find('/'); slash != std::string::npos) {
    name = name.substr(0, slash);
  }
  return absl::StrCat(suite, ".", name);
}

// A device no backend under test owns, for "another device's memory".
FakeDevice& ForeignDevice() {
  static FakeDevice* const device =
      FakeDevice::Create("conformance_foreign").release();
  return *device;
}

}  // namespace

ManualEvent::~ManualEvent() {
  if (opener_.joinable()) opener_.join();
  if (semaphore_->status().ok()) Open();
}

void ManualEvent::Open() {
  if (semaphore_->Value() < 1) (void)semaphore_->Signal(1);
}

void ManualEvent::Fail(absl::Status status) {
  semaphore_->Fail(std::move(status));
}

void ManualEvent::OpenLater(absl::Duration delay) {
  opener_ = std::thread([this, delay] {
    absl::SleepFor(delay);
    Open();
  });
}

std::vector<float> Iota(int64_t n, float scale, float offset) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale + offset;
  return v;
}

void ConformanceTest::SetUp() {
  const ConformanceBackend& param = GetParam();
  const std::string key = CurrentTestKey();
  if (auto it = param.unsupported.find(key); it != param.unsupported.end()) {
    GTEST_SKIP() << param.name << " does not support " << key << ": "
                 << it->second;
  }
  absl::StatusOr<std::unique_ptr<Backend>> created = param.create();
  if (absl::IsUnavailable(created.status())) {
    if (param.required_under_gpu_config && GpuRequired()) {
      GTEST_FAIL() << "FERRY_REQUIRE_GPU=1 (--config=gpu) but " << param.name
                   << " is unavailable: " << created.status();
    }
    GTEST_SKIP() << param.name << " unavailable: " << created.status();
  }
  ASSERT_THAT(created, IsOk());
  backend_ = *std::move(created);
  if (auto it = param.expected_failures.find(key);
      it != param.expected_failures.end()) {
    expected_reason_ = it->second;
    expected_ = std::make_unique<::testing::ScopedFakeTestPartResultReporter>(
        ::testing::ScopedFakeTestPartResultReporter::
            INTERCEPT_ONLY_CURRENT_THREAD,
        &expected_results_);
  }
}

void ConformanceTest::TearDown() {
  if (backend_ != nullptr) (void)backend_->Synchronize();
  if (expected_ == nullptr) return;
  expected_.reset();
  int failures = 0;
  for (int i = 0; i < expected_results_.size(); ++i) {
    if (expected_results_.GetTestPartResult(i).failed()) ++failures;
  }
  if (failures == 0) {
    ADD_FAILURE() << CurrentTestKey() << " is listed as an expected failure ("
                  << expected_reason_
                  << ") but passed: remove it from the list";
  } else {
    std::printf("%s: %d expected failure(s): %s\n", CurrentTestKey().c_str(),
                failures, expected_reason_.c_str());
  }
}

bool ConformanceTest::NeedsHostBuffer() {
  return device().props().caps.host_buffer &&
         device().host_buffer_type() != nullptr;
}

Tensor* ConformanceTest::NewTensorIn(BufferType& type, int64_t n,
                                     const char* name) {
  absl::StatusOr<Tensor*> t = ctx_.NewTensor(DType::kF32, {n}, name);
  EXPECT_THAT(t, IsOk());
  if (!t.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      type.Allocate(std::max<size_t>(type.AllocSize(**t), 1));
  EXPECT_THAT(buffer, IsOk());
  if (!buffer.ok()) return nullptr;
  EXPECT_THAT(PlaceTensor(**buffer, **t, 0), IsOk());
  buffers_.push_back(*std::move(buffer));
  return *t;
}

Tensor* ConformanceTest::NewDeviceTensor(int64_t n, const char* name) {
  return NewTensorIn(*backend().default_buffer_type(), n, name);
}

Tensor* ConformanceTest::NewForeignTensor(int64_t n, const char* name) {
  return NewTensorIn(*ForeignDevice().default_buffer_type(), n, name);
}

void ConformanceTest::Place(const Graph& graph, BufferType* in) {
  BufferType& type = in != nullptr ? *in : *backend().default_buffer_type();
  const size_t align = type.alignment();
  auto round = [align](size_t n) { return (n + align - 1) / align * align; };
  size_t total = 0;
  std::vector<Tensor*> owners;
  for (auto list : {graph.leafs(), graph.nodes()}) {
    for (Tensor* t : list) {
      if (t->view_src != nullptr || t->buffer != nullptr) continue;
      owners.push_back(t);
      total += round(type.AllocSize(*t));
    }
  }
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      type.Allocate(std::max<size_t>(total, 1));
  ASSERT_THAT(buffer, IsOk());
  size_t offset = 0;
  for (Tensor* t : owners) {
    ASSERT_THAT(PlaceTensor(**buffer, *t, offset), IsOk());
    offset += round(type.AllocSize(*t));
  }
  for (auto list : {graph.leafs(), graph.nodes()}) {
    for (Tensor* t : list) {
      if (t->view_src != nullptr && t->buffer == nullptr) {
        ASSERT_THAT(PlaceView(*t), IsOk());
      }
    }
  }
  buffers_.push_back(*std::move(buffer));
}

std::vector<float> ConformanceTest::Read(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.NumElements()), -12345.0f);
  EXPECT_THAT(GetTensorData(t, out.data()), IsOk());
  return out;
}

void ConformanceTest::Write(Tensor& t, const std::vector<float>& values) {
  ASSERT_EQ(static_cast<int64_t>(values.size()), t.NumElements());
  ASSERT_THAT(SetTensorData(t, values.data()), IsOk());
}

std::unique_ptr<Backend> ConformanceTest::SecondBackend() {
  absl::StatusOr<std::unique_ptr<Backend>> second = GetParam().create();
  EXPECT_THAT(second, IsOk());
  return second.ok() ? *std::move(second) : nullptr;
}

std::unique_ptr<Backend> ConformanceTest::CpuBackend() {
  absl::StatusOr<std::unique_ptr<Backend>> cpu =
      GetCpuDevice().CreateBackend("threads=1");
  EXPECT_THAT(cpu, IsOk());
  return cpu.ok() ? *std::move(cpu) : nullptr;
}

}  // namespace ferry::testing
