#include "ferry/backends/cuda/testing/fake_cuda_control.h"

#include <memory>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "ferry/backends/cuda/testing/internal/kernel_registry.h"
#include "ferry/backends/cuda/testing/internal/runtime_state.h"

namespace ferry::fake_cuda {

using ::ferry::fake_cuda_internal::GateState;
using ::ferry::fake_cuda_internal::KernelRegistry;
using ::ferry::fake_cuda_internal::Op;
using ::ferry::fake_cuda_internal::Runtime;

absl::Status Configure(const Config& config) {
  if (Runtime::Started()) {
    return absl::FailedPreconditionError(
        "fake CUDA: Configure after the runtime was first used");
  }
  if (config.device_count < 0 || config.device_count > 16) {
    return absl::InvalidArgumentError("fake CUDA: 0 to 16 devices");
  }
  Runtime::PendingConfig() = config;
  return absl::OkStatus();
}

Config CurrentConfig() {
  return Runtime::Started() ? Runtime::Get().config()
                            : Runtime::PendingConfig();
}

void InjectLaunchFault(int nth, cudaError_t error, FaultSurface surface) {
  Runtime::Get().InjectLaunchFault(nth, error, surface);
}

void InjectAllocationFailure(int nth) {
  Runtime::Get().InjectAllocationFailure(nth);
}

void InjectHostRegisterError(int nth, cudaError_t error) {
  Runtime::Get().InjectHostRegisterError(nth, error);
}

void InjectNotReady(int count) { Runtime::Get().InjectNotReady(count); }

void SetCopyLatency(absl::Duration latency) {
  Runtime::Get().SetCopyLatency(latency);
}

void SetCanAccessPeer(int device, int peer, bool can) {
  Runtime::Get().SetCanAccessPeer(device, peer, can);
}

void ClearFaults() { Runtime::Get().ClearFaults(); }

void ClearStickyError(int device) { Runtime::Get().ClearSticky(device); }

std::shared_ptr<Gate> HoldStream(cudaStream_t stream) {
  cudaError_t error = cudaSuccess;
  CUstream_st* resolved = Runtime::Get().Resolve(stream, &error);
  if (resolved == nullptr) return nullptr;
  auto gate = std::make_shared<GateState>();
  Op op;
  op.label = "fake_cuda::HoldStream";
  op.gate = gate;
  Runtime::Get().Enqueue(resolved, std::move(op));
  return gate;
}

std::shared_ptr<Gate> HoldLegacyStream(int device) {
  if (!Runtime::Get().ValidDevice(device)) return nullptr;
  auto gate = std::make_shared<GateState>();
  Op op;
  op.label = "fake_cuda::HoldLegacyStream";
  op.gate = gate;
  Runtime::Get().Enqueue(Runtime::Get().LegacyStream(device), std::move(op));
  return gate;
}

Stats GetStats() { return Runtime::Get().stats(); }

bool ContextCreated(int device) { return Runtime::Get().HasContext(device); }

bool PeerAccessEnabled(int device, int peer) {
  return Runtime::Get().PeerEnabled(device, peer);
}

cudaError_t StickyError(int device) { return Runtime::Get().Sticky(device); }

void WaitIdle(int device) { Runtime::Get().WaitDevice(device); }

size_t MemoryInUse(int device) { return Runtime::Get().Used(device); }

void SetRaceMode(RaceMode mode) { Runtime::Get().SetRaceMode(mode); }

std::vector<std::string> TakeRaceReports() {
  return Runtime::Get().TakeRaceReports();
}

void RegisterKernelEmulator(const void* kernel, KernelEmulator emulator) {
  KernelRegistry::Get().AddEmulator(kernel, emulator);
}

absl::Status KernelFault(cudaError_t error, absl::string_view what) {
  absl::Status status = absl::InternalError(what);
  status.SetPayload(fake_cuda_internal::kKernelFaultPayload,
                    absl::Cord(std::to_string(static_cast<int>(error))));
  return status;
}

std::vector<std::string> KernelsWithoutEmulator() {
  return KernelRegistry::Get().WithoutEmulator();
}

}  // namespace ferry::fake_cuda
