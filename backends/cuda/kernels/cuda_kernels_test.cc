// Runs every case of internal/kernel_test_cases.h through Launch on a real
// GPU and compares with the reference evaluator. Tagged requires-gpu; skips
// when no CUDA device is usable.
#include "ferry/backends/cuda/kernels/cuda_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/kernels/internal/kernel_test_cases.h"
#include "ferry/backends/cuda/testing/cuda_test_util.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/op.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::cuda_kernels {
namespace {

using ::ferry::cuda_kernels_internal::AllKernelCases;
using ::ferry::cuda_kernels_internal::ExpectCaseMatches;
using ::ferry::cuda_kernels_internal::KernelCase;

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

absl::Status Cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::Status Cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cublasGetStatusString(status)));
}

// A device copy of a graph's host memory. Every tensor's host bytes are
// mirrored in device buffers (one per run of overlapping tensors), the
// tensors' `data` point there while the graph runs, and the bytes come back
// afterwards.
class DeviceMirror {
 public:
  explicit DeviceMirror(const Graph& graph) {
    for (Tensor* t : graph.leafs()) tensors_.push_back(t);
    for (Tensor* t : graph.nodes()) tensors_.push_back(t);
  }
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  ~DeviceMirror() {
    for (Segment& s : segments_) cudaFree(s.allocation);
  }

  // Copies host bytes to the device and points every tensor there.
  absl::Status ToDevice() {
    std::vector<std::pair<std::byte*, std::byte*>> ranges;
    for (Tensor* t : tensors_) {
      auto* begin = static_cast<std::byte*>(t->data);
      ranges.emplace_back(begin, begin + std::max<int64_t>(t->NumBytes(), 1));
    }
    std::sort(ranges.begin(), ranges.end());
    for (const auto& [begin, end] : ranges) {
      if (!segments_.empty() && begin <= segments_.back().host_end) {
        segments_.back().host_end = std::max(segments_.back().host_end, end);
      } else {
        segments_.push_back({begin, end, nullptr, nullptr});
      }
    }
    for (Segment& s : segments_) {
      const size_t bytes = static_cast<size_t>(s.host_end - s.host_begin);
      // At the host bytes' offset in a 256-byte line: a misaligned host
      // tensor stays misaligned on the device.
      const size_t skew = reinterpret_cast<uintptr_t>(s.host_begin) % 256;
      FERRY_RETURN_IF_ERROR(
          Cuda(cudaMalloc(&s.allocation, bytes + skew), "cudaMalloc"));
      s.device = static_cast<std::byte*>(s.allocation) + skew;
      FERRY_RETURN_IF_ERROR(Cuda(
          cudaMemcpy(s.device, s.host_begin, bytes, cudaMemcpyHostToDevice),
          "cudaMemcpy h2d"));
    }
    for (Tensor* t : tensors_) {
      host_data_.push_back(t->data);
      auto* p = static_cast<std::byte*>(t->data);
      for (const Segment& s : segments_) {
        if (p >= s.host_begin && p < s.host_end) {
          t->data = static_cast<std::byte*>(s.device) + (p - s.host_begin);
          break;
        }
      }
    }
    return absl::OkStatus();
  }

  // Restores host pointers and copies the device bytes back.
  absl::Status ToHost() {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      tensors_[i]->data = host_data_[i];
    }
    for (Segment& s : segments_) {
      FERRY_RETURN_IF_ERROR(
          Cuda(cudaMemcpy(s.host_begin, s.device,
                          static_cast<size_t>(s.host_end - s.host_begin),
                          cudaMemcpyDeviceToHost),
               "cudaMemcpy d2h"));
    }
    return absl::OkStatus();
  }

 private:
  struct Segment {
    std::byte* host_begin;
    std::byte* host_end;
    void* allocation;
    void* device;  // allocation + the host's misalignment.
  };
  std::vector<Tensor*> tensors_;
  std::vector<void*> host_data_;
  std::vector<Segment> segments_;
};

// Runs the graph's nodes with Launch on one stream, then synchronizes.
absl::Status RunOnDevice(const Graph& graph) {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* workspace = nullptr;
  void* scratch = nullptr;
  DeviceMirror mirror(graph);
  absl::Status status = [&]() -> absl::Status {
    size_t scratch_bytes = 0;
    for (Tensor* node : graph.nodes()) {
      FERRY_RETURN_IF_ERROR(cpu_kernels::CheckSupported(*node));
      scratch_bytes = std::max(scratch_bytes, ScratchBytes(*node));
    }
    FERRY_RETURN_IF_ERROR(Cuda(cudaStreamCreate(&stream), "cudaStreamCreate"));
    FERRY_RETURN_IF_ERROR(Cublas(cublasCreate(&cublas), "cublasCreate"));
    FERRY_RETURN_IF_ERROR(Cublas(cublasSetStream(cublas, stream), "setStream"));
    FERRY_RETURN_IF_ERROR(
        Cuda(cudaMalloc(&workspace, kCublasWorkspaceBytes), "cudaMalloc"));
    FERRY_RETURN_IF_ERROR(
        Cublas(cublasSetWorkspace(cublas, workspace, kCublasWorkspaceBytes),
               "cublasSetWorkspace"));
    if (scratch_bytes > 0) {
      FERRY_RETURN_IF_ERROR(
          Cuda(cudaMalloc(&scratch, scratch_bytes), "cudaMalloc"));
    }
    FERRY_RETURN_IF_ERROR(mirror.ToDevice());
    LaunchContext ctx;
    ctx.stream = stream;
    ctx.cublas = cublas;
    ctx.scratch = scratch;
    ctx.scratch_bytes = scratch_bytes;
    absl::Status launched = absl::OkStatus();
    for (Tensor* node : graph.nodes()) {
      launched = Launch(*node, ctx);
      if (!launched.ok()) break;
    }
    const absl::Status synced =
        Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const absl::Status copied = mirror.ToHost();
    FERRY_RETURN_IF_ERROR(launched);
    FERRY_RETURN_IF_ERROR(synced);
    return copied;
  }();
  if (cublas != nullptr) cublasDestroy(cublas);
  if (stream != nullptr) cudaStreamDestroy(stream);
  cudaFree(workspace);
  cudaFree(scratch);
  return status;
}

const std::vector<KernelCase>& Cases() {
  static const auto* cases = new std::vector<KernelCase>(AllKernelCases());
  return *cases;
}

class CudaKernelsTest : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    // Skips without a usable device, saying why; fails instead under
    // --config=gpu (FERRY_REQUIRE_GPU=1).
    FERRY_CUDA_TEST_NEEDS_DEVICES(1);
  }
};

TEST_P(CudaKernelsTest, MatchesReference) {
  ExpectCaseMatches(Cases()[GetParam()], &RunOnDevice);
}

std::string CaseName(const ::testing::TestParamInfo<size_t>& info) {
  std::string name = Cases()[info.param].name;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaKernelsTest,
                         ::testing::Range<size_t>(0, Cases().size()), CaseName);

}  // namespace
}  // namespace ferry::cuda_kernels
