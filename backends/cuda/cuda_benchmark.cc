// CUDA backend benchmarks (need a GPU; without one every case reports the
// reason and skips). Run with
//   ./bazelw run --config=opt //backends/cuda:cuda_benchmark
//
//   BM_Transfer              h2d/d2h, pinned vs pageable (bytes/s); compare
//                            with the link (H100 PCIe Gen5 x16: ~64 GB/s
//                            raw, ~50-55 GB/s achievable).
//   BM_CopyComputeOverlap    an upload on one backend beside a spin kernel
//                            on another: overlap = (copy + compute) / both.
//   BM_LaunchRaw/BM_LaunchNode  an empty kernel vs a ferry add node through
//                            EnqueueCompute (the backend's issue overhead).
//   BM_EventToCoroutine      kernel end to coroutine resume through the
//                            poller, vs cudaStreamSynchronize.
//   BM_MulMat                cuBLAS GEMM through the backend, f32/f16/bf16.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ferry/backends/cuda/cuda_backend.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/cuda/testing/cuda_test_util.h"
#include "ferry/backends/cuda/testing/test_kernels.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"

namespace ferry {
namespace {

// The cuda0 device, or null after skipping `state` with the reason.
CudaDevice* DeviceOrSkip(benchmark::State& state) {
  absl::Status usable = cuda_testing::CheckCudaDevices(1);
  if (!usable.ok()) {
    state.SkipWithError(std::string(usable.message()).c_str());
    return nullptr;
  }
  absl::StatusOr<CudaDevice*> device = cuda_testing::GlobalCudaDevice(0);
  if (!device.ok()) {
    state.SkipWithError(std::string(device.status().message()).c_str());
    return nullptr;
  }
  return *device;
}

// A backend on `device`, or null after skipping `state` with the reason.
std::unique_ptr<CudaBackend> NewBackend(CudaDevice& device,
                                        benchmark::State& state) {
  auto backend = device.CreateBackend();
  if (!backend.ok()) {
    state.SkipWithError(std::string(backend.status().message()).c_str());
    return nullptr;
  }
  return std::unique_ptr<CudaBackend>(
      static_cast<CudaBackend*>(backend->release()));
}

// A device tensor of `bytes` and host memory for it (pinned or pageable).
struct Transfer {
  Context ctx;
  std::unique_ptr<Buffer> device_buffer;
  std::unique_ptr<Buffer> pinned;
  std::vector<char> pageable;
  Tensor* tensor = nullptr;
  void* host = nullptr;
};

bool MakeTransfer(CudaDevice& device, size_t bytes, bool pinned,
                  Transfer& out) {
  auto t = out.ctx.NewTensor(DType::kI32, {static_cast<int64_t>(bytes / 4)});
  if (!t.ok()) return false;
  out.tensor = *t;
  auto buffer = device.default_buffer_type()->Allocate(bytes);
  if (!buffer.ok() || !PlaceTensor(**buffer, *out.tensor, 0).ok()) return false;
  out.device_buffer = *std::move(buffer);
  if (pinned) {
    auto host = device.host_buffer_type()->Allocate(bytes);
    if (!host.ok()) return false;
    out.pinned = *std::move(host);
    out.host = out.pinned->base();
  } else {
    out.pageable.resize(bytes);
    out.host = out.pageable.data();
  }
  std::memset(out.host, 1, bytes);
  return true;
}

// range(0): MiB; range(1): 1 pinned, 0 pageable; range(2): 0 upload,
// 1 download.
void BM_Transfer(benchmark::State& state) {
  CudaDevice* device = DeviceOrSkip(state);
  if (device == nullptr) return;
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  const bool pinned = state.range(1) != 0;
  const bool upload = state.range(2) == 0;
  auto backend = NewBackend(*device, state);
  Transfer transfer;
  if (backend == nullptr || !MakeTransfer(*device, bytes, pinned, transfer)) {
    state.SkipWithError("setup failed");
    return;
  }
  for (auto _ : state) {
    if (upload) {
      (void)backend->EnqueueSetTensor(*transfer.tensor, transfer.host, 0,
                                      bytes);
    } else {
      (void)backend->EnqueueGetTensor(*transfer.tensor, transfer.host, 0,
                                      bytes);
    }
    (void)backend->Synchronize();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.SetLabel(std::string(upload ? "h2d " : "d2h ") +
                 (pinned ? "pinned" : "pageable"));
}
BENCHMARK(BM_Transfer)
    ->ArgsProduct({{1, 64, 256}, {0, 1}, {0, 1}})
    ->UseRealTime();

// mode 0: copy alone, 1: compute alone, 2: both at once on two backends.
void BM_CopyComputeOverlap(benchmark::State& state) {
  CudaDevice* device = DeviceOrSkip(state);
  if (device == nullptr) return;
  const int mode = static_cast<int>(state.range(0));
  constexpr size_t kBytes = size_t{256} << 20;
  constexpr int64_t kSpinNs = 5'000'000;
  auto copier = NewBackend(*device, state);
  auto computer = NewBackend(*device, state);
  Transfer transfer;
  if (copier == nullptr || computer == nullptr ||
      !MakeTransfer(*device, kBytes, /*pinned=*/true, transfer)) {
    state.SkipWithError("setup failed");
    return;
  }
  for (auto _ : state) {
    if (mode != 1) {
      (void)copier->EnqueueSetTensor(*transfer.tensor, transfer.host, 0,
                                     kBytes);
    }
    if (mode != 0) {
      (void)cuda_testing::LaunchSpinKernel(
          computer->stream(CudaBackend::StreamKind::kCompute), kSpinNs);
    }
    (void)copier->Synchronize();
    (void)computer->Synchronize();
  }
  state.SetLabel(mode == 0 ? "copy" : mode == 1 ? "compute" : "both");
}
BENCHMARK(BM_CopyComputeOverlap)->DenseRange(0, 2)->UseRealTime();

void BM_LaunchRaw(benchmark::State& state) {
  CudaDevice* device = DeviceOrSkip(state);
  if (device == nullptr) return;
  auto backend = NewBackend(*device, state);
  if (backend == nullptr) return;
  cudaStream_t stream = backend->stream(CudaBackend::StreamKind::kCompute);
  for (auto _ : state) {
    for (int i = 0; i < 100; ++i) (void)cuda_testing::LaunchEmptyKernel(stream);
    (void)cudaStreamSynchronize(stream);
  }
  state.SetItemsProcessed(state.iterations() * 100);
}
BENCHMARK(BM_LaunchRaw)->UseRealTime();

void BM_LaunchNode(benchmark::State& state) {
  CudaDevice* device = DeviceOrSkip(state);
  if (device == nullptr) return;
  auto backend = NewBackend(*device, state);
  if (backend == nullptr) return;
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {32});
  Tensor* sum = *Add(ctx, a, a);
  auto buffer = device->default_buffer_type()->Allocate(1024);
  if (!buffer.ok() || !PlaceTensor(**buffer, *a, 0).ok() ||
      !PlaceTensor(**buffer, *sum, 512).ok()) {
    state.SkipWithError("setup failed");
    return;
  }
  std::vector<Tensor*> nodes(100, sum);
  for (auto _ : state) {
    (void)backend->EnqueueCompute(NodeSpan(nodes));
    (void)backend->Synchronize();
  }
  state.SetItemsProcessed(state.iterations() * 100);
}
BENCHMARK(BM_LaunchNode)->UseRealTime();

Task<absl::Status> AwaitEvent(Event event) { co_return co_await event; }

// mode 0: co_await the backend's event (poller); 1: cudaStreamSynchronize.
void BM_EventToCoroutine(benchmark::State& state) {
  CudaDevice* device = DeviceOrSkip(state);
  if (device == nullptr) return;
  auto backend = NewBackend(*device, state);
  if (backend == nullptr) return;
  const bool poll = state.range(0) == 0;
  for (auto _ : state) {
    cudaStream_t stream = backend->stream(CudaBackend::StreamKind::kCompute);
    (void)cuda_testing::LaunchSpinKernel(stream, 20'000);
    if (poll) {
      (void)SyncWait(AwaitEvent(backend->Record()));
    } else {
      (void)cudaStreamSynchronize(stream);
    }
  }
  state.SetLabel(poll ? "poller -> coroutine" : "cudaStreamSynchronize");
}
BENCHMARK(BM_EventToCoroutine)->Arg(0)->Arg(1)->UseRealTime();

// range(0): n (square n x n x n); range(1): weight dtype (0 f32, 1 f16,
// 2 bf16).
void BM_MulMat(benchmark::State& state) {
  CudaDevice* device = DeviceOrSkip(state);
  if (device == nullptr) return;
  const int64_t n = state.range(0);
  const DType dtype = state.range(1) == 0   ? DType::kF32
                      : state.range(1) == 1 ? DType::kF16
                                            : DType::kBF16;
  auto backend = NewBackend(*device, state);
  if (backend == nullptr) return;
  Context ctx;
  Tensor* a = *ctx.NewTensor(dtype, {n, n});
  Tensor* b = *ctx.NewTensor(DType::kF32, {n, n});
  Tensor* c = *MulMat(ctx, a, b);
  const size_t a_bytes = static_cast<size_t>(a->NumBytes());
  const size_t b_bytes = static_cast<size_t>(b->NumBytes());
  auto buffer =
      device->default_buffer_type()->Allocate(a_bytes + 2 * b_bytes + 1024);
  if (!buffer.ok() || !PlaceTensor(**buffer, *a, 0).ok() ||
      !PlaceTensor(**buffer, *b, (a_bytes + 255) / 256 * 256).ok() ||
      !PlaceTensor(**buffer, *c, (a_bytes + b_bytes + 511) / 256 * 256).ok() ||
      !(*buffer)->Clear(0).ok()) {
    state.SkipWithError("setup failed");
    return;
  }
  Tensor* nodes[] = {c};
  for (auto _ : state) {
    (void)backend->EnqueueCompute(NodeSpan(nodes));
    (void)backend->Synchronize();
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * n * n * n * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(DTypeName(dtype)));
}
BENCHMARK(BM_MulMat)
    ->ArgsProduct({{1024, 4096, 8192}, {0, 1, 2}})
    ->UseRealTime();

}  // namespace
}  // namespace ferry
