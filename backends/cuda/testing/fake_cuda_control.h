// The fake CUDA runtime's control API, for tests: a test double of the CUDA
// runtime and cuBLAS that lets the real CUDA backend run on a machine
// without a GPU (testonly; linked in place of cudart and cuBLAS by
// //backends/cuda/testing:fake_cuda_runtime).
//
// What the fake models (see cudart_entry_points.cc and cublas_entry_points.cc
// for the APIs it defines):
//   - devices with properties, a memory budget and peer access, each with
//     a primary context created by the first call that needs one;
//   - device memory as host memory the host cannot touch: cudaMalloc
//     returns an address mapped PROT_NONE (a host dereference faults) whose
//     bytes the fake's engines reach through a second, private mapping;
//     new memory is poisoned (0xff: NaN floats), freed memory is
//     quarantined so stale pointers are caught;
//   - streams as in-order queues, each run by its own thread, with the
//     legacy default stream's implicit synchronization with blocking
//     streams; events with record/query/synchronize/wait; cudaMemcpy's
//     pageable and pinned semantics (a pageable synchronous upload returns
//     with its DMA still in flight, device-to-device copies do not wait);
//   - the per-thread last error with CUDA's rules: an error is kept until
//     cudaGetLastError reads it; a sticky error (illegal address, launch
//     failure) ruins the device's context, every later call that touches
//     the device returns it and cudaGetLastError never clears it;
//   - host registration rules (overlaps are
//   cudaErrorHostMemoryAlreadyRegistered,
//     read-only pages need cudaHostRegisterReadOnly);
//   - kernels: `<<<...>>>` and cudaLaunchKernel(Ex) run the kernel's host
//     emulation (registered with RegisterKernelEmulator) on the stream's
//     thread, with the device addresses of its arguments checked (an
//     address outside every allocation is a sticky illegal address) and,
//     in ferry's kernels, every word access at an address that is not a
//     multiple of its size a sticky misaligned address, as on a GPU;
//   - cuBLAS GEMMs computed on the host in the handle's stream;
//   - a device-memory race check: an operation enqueued while an earlier,
//     conflicting one (either writes the bytes) is still in flight and not
//     ordered before it by its stream, an event wait or the legacy stream
//     is reported (and aborts the process, like a sanitizer, by default).
//
// Configure it with the environment variable FERRY_FAKE_CUDA (read at the
// first call), e.g. "devices=1,memory=64MiB,driver=12080,peer=0", or with
// Configure() before the first call.
#ifndef FERRY_BACKENDS_CUDA_TESTING_FAKE_CUDA_H_
#define FERRY_BACKENDS_CUDA_TESTING_FAKE_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ferry::fake_cuda {

// The CUDA version the fake implements (what cudaRuntimeGetVersion says; a
// driver below it is "insufficient").
inline constexpr int kRuntimeVersion = 13000;

struct Config {
  int device_count = 2;
  size_t memory_bytes = size_t{4} << 30;  // Per device.
  int driver_version = kRuntimeVersion;
  bool peer_access = true;  // Every pair of devices can enable peer access.
  bool guard_device_memory = true;
};

// Sets the configuration; FailedPrecondition once the fake was used.
absl::Status Configure(const Config& config);
// The configuration in force (the environment's, if nothing was set).
Config CurrentConfig();

// --- Fault injection (counted from the call on, process-wide). ---

enum class FaultSurface {
  // The kernel launches, and fails when it runs: the error appears at the
  // next calls that touch the device (queries, synchronizations, launches).
  kAtExecution,
  // The launch call itself returns the error (a fault of earlier work
  // noticed at this launch).
  kAtLaunch,
};
// The `nth` kernel launch from now (1 = the next; cuBLAS GEMMs count as
// launches) fails with `error` (sticky when CUDA's is).
void InjectLaunchFault(int nth, cudaError_t error = cudaErrorIllegalAddress,
                       FaultSurface surface = FaultSurface::kAtExecution);
// The `nth` cudaMalloc from now fails with cudaErrorMemoryAllocation.
void InjectAllocationFailure(int nth);
// The `nth` cudaHostRegister from now fails with `error` (e.g.
// cudaErrorUnknown, which the driver may answer for pinning it cannot do;
// not sticky).
void InjectHostRegisterError(int nth, cudaError_t error = cudaErrorUnknown);
// The next `count` event and stream queries answer cudaErrorNotReady, done
// or not (a storm of not-ready answers).
void InjectNotReady(int count);
// Copies and memsets take at least `latency` on their stream from now on
// (DMA time), so tests can see what returns before a copy lands.
void SetCopyLatency(absl::Duration latency);
// Makes `device` able (or not) to reach `peer`'s memory.
void SetCanAccessPeer(int device, int peer, bool can);
// Forgets injected faults and the device's sticky error (a fake-only
// recovery for tests; a real process would have to restart).
void ClearFaults();
void ClearStickyError(int device);

// --- Holding streams. ---

// Work enqueued on a held stream after the hold waits until Open().
class Gate {
 public:
  virtual ~Gate() = default;
  virtual void Open() = 0;
  // True once the stream reached the gate (all earlier work is done).
  virtual bool Reached() const = 0;
};
// Holds `stream` (0 or cudaStreamLegacy: the current device's legacy
// default stream) from its current end.
std::shared_ptr<Gate> HoldStream(cudaStream_t stream);
// Holds device `device`'s legacy default stream.
std::shared_ptr<Gate> HoldLegacyStream(int device);

// --- Observations. ---

struct Stats {
  int64_t api_calls = 0;  // Runtime and cuBLAS calls (not registration).
  int64_t launches = 0;   // Kernels and GEMMs enqueued.
  int64_t mallocs = 0;
  int64_t failed_mallocs = 0;  // cudaMalloc calls that ran out of memory.
  int64_t frees = 0;
  int64_t device_synchronizes = 0;  // cudaDeviceSynchronize calls.
  int64_t legacy_stream_ops = 0;    // Work enqueued on legacy streams.
  int64_t peer_enables = 0;         // Successful cudaDeviceEnablePeerAccess.
};
Stats GetStats();
// True once device `device`'s primary context exists.
bool ContextCreated(int device);
bool PeerAccessEnabled(int device, int peer);
// The sticky error of `device`, or cudaSuccess.
cudaError_t StickyError(int device);
// Blocks until every stream of `device` has run what it was given.
void WaitIdle(int device);
// Device memory in use (cudaMalloc'ed, not freed) on `device`.
size_t MemoryInUse(int device);

// --- The device-memory race check. ---

enum class RaceMode { kAbort, kRecord };
// kAbort (default) prints a report and aborts; kRecord keeps reports for
// TakeRaceReports.
void SetRaceMode(RaceMode mode);
std::vector<std::string> TakeRaceReports();

// --- Kernels. ---

// A device-memory range a kernel touches.
struct MemoryAccess {
  const void* address = nullptr;  // A device address.
  size_t bytes = 0;
  bool write = false;
};

// Maps device addresses to where the fake keeps their bytes.
class AddressTranslator {
 public:
  virtual ~AddressTranslator() = default;
  // The host address of device bytes [address, address + bytes), which
  // must lie in one of the launch's MemoryAccess ranges; nullptr otherwise.
  virtual void* Translate(const void* address, size_t bytes) const = 0;
};

// A kernel launch bound to its arguments (copied at launch, as CUDA does).
struct KernelRun {
  std::vector<MemoryAccess> accesses;
  // Runs the kernel on the stream's thread. An error is a device fault
  // (sticky cudaErrorLaunchFailure), e.g. threads that diverged at a
  // barrier.
  absl::AnyInvocable<absl::Status(const AddressTranslator&) &&> run;
};

struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;
};

// What KernelRun::run returns for a fault a GPU reports as `error` (e.g.
// cudaErrorMisalignedAddress; sticky, like every fault inside a kernel).
// Any other error of a run is a launch failure (cudaErrorLaunchFailure).
absl::Status KernelFault(cudaError_t error, absl::string_view what);

// Binds a launch of the kernel: `args[i]` points at its i-th parameter.
// An error fails the launch with cudaErrorInvalidValue.
using KernelEmulator = absl::StatusOr<KernelRun> (*)(void** args,
                                                     const LaunchShape& shape);

// Makes launches of `kernel` (a __global__ function's host address, in the
// calling translation unit) run `emulator`. Launches from other units of
// the same kernel (same device symbol) find it too.
void RegisterKernelEmulator(const void* kernel, KernelEmulator emulator);
// Device symbols of kernels registered with CUDA that have no emulator.
std::vector<std::string> KernelsWithoutEmulator();

}  // namespace ferry::fake_cuda

#endif  // FERRY_BACKENDS_CUDA_TESTING_FAKE_CUDA_H_
