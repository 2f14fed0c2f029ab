// CudaDevice: one CUDA GPU, its buffer types and shared machinery.
//
// Every GPU the driver reports becomes a registry device "cuda0", "cuda1",
// ... at static-init time (the cuda_backend target is alwayslink). Without a
// driver or GPU the registry simply has no CUDA device and the reason is
// printed once (cuda_probe.h).
//
// A device owns what its backends (streams) share:
//   - device memory through a stream-ordered caching pool
//     (internal/caching_allocator.h): freeing a buffer records fences on
//     every stream of the device, so its memory is handed out again only
//     once the work that may use it has finished, without cudaFree's
//     device-wide synchronization;
//   - pinned host buffers (cudaHostAlloc, portable to every GPU) and
//     buffers over registered host memory (cudaHostRegister);
//   - a pool of timing-free CUDA events and the completion poller thread
//     that turns their completion into timeline signals;
//   - the sticky error: after an error that ruins the CUDA context (illegal
//     address, launch failure, ...), every later call on the device returns
//     it. Other errors fail only the backend that met them.
#ifndef FERRY_BACKENDS_CUDA_CUDA_DEVICE_H_
#define FERRY_BACKENDS_CUDA_CUDA_DEVICE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cuda/internal/caching_allocator.h"
#include "ferry/backends/cuda/internal/completion_poller.h"
#include "ferry/backends/device.h"
#include "ferry/backends/registry.h"
#include "ferry/graph/tensor.h"

namespace ferry {

class CudaBackend;
class CudaDevice;

// What the driver says about a GPU.
struct CudaDeviceInfo {
  int ordinal = 0;
  std::string gpu_name;    // e.g. "NVIDIA H100 80GB HBM3".
  std::string pci_bus_id;  // e.g. "0000:65:00.0".
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  size_t total_memory = 0;
  bool integrated = false;
  int async_engines = 0;  // Copy engines.
};

// Device memory of one GPU, from the device's caching pool.
class CudaBufferType final : public BufferType {
 public:
  static constexpr size_t kAlignment = 256;

  absl::string_view name() const override { return name_; }
  size_t alignment() const override { return kAlignment; }
  bool is_host() const override { return false; }
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  CudaDevice& cuda_device() const { return device_; }

 private:
  friend class CudaDevice;
  CudaBufferType(CudaDevice& device, std::string name)
      : device_(device), name_(std::move(name)) {}

  CudaDevice& device_;
  std::string name_;
};

// Page-locked host memory: copies from and to it are asynchronous DMA.
class CudaPinnedBufferType final : public BufferType {
 public:
  absl::string_view name() const override { return name_; }
  size_t alignment() const override { return 64; }
  bool is_host() const override { return true; }
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;

 private:
  friend class CudaDevice;
  CudaPinnedBufferType(CudaDevice& device, std::string name)
      : device_(device), name_(std::move(name)) {}

  CudaDevice& device_;
  std::string name_;
};

// Thread-safe.
class CudaDevice final : public Device {
 public:
  // Opens GPU `ordinal` (as numbered by the CUDA runtime). Unavailable
  // without a driver or such a GPU.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int ordinal);
  // Every backend must be destroyed first.
  ~CudaDevice() override;

  absl::string_view name() const override { return name_; }
  DeviceProps props() const override;
  const CudaDeviceInfo& info() const { return info_; }
  int ordinal() const { return info_.ordinal; }

  // `params`: empty (no options yet); anything else is InvalidArgument.
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
      absl::string_view params = "") override;
  BufferType* default_buffer_type() override { return &buffer_type_; }
  BufferType* host_buffer_type() override { return &pinned_type_; }
  // Registers `data` with CUDA (cudaHostRegister) for async copies; the
  // buffer unregisters it when destroyed. The caller keeps it alive.
  absl::StatusOr<std::unique_ptr<Buffer>> BufferFromHostPointer(
      void* data, size_t size) override;

  // Exactly the ops the CUDA kernels implement (the same contract as the
  // CPU kernels' CheckSupported).
  bool SupportsOp(const Tensor& node) const override;
  // Kernels read and write this device's memory only.
  bool SupportsBufferType(const BufferType* type) const override;
  // Worth moving a host-resident weight here for batches of 32 or more.
  bool OffloadOp(const Tensor& node) const override;

  // The caching pool's counters.
  cuda_internal::CachingAllocatorStats memory_stats() const {
    return allocator_.stats();
  }
  // Gives idle cached blocks back to CUDA; returns the bytes released.
  size_t ReleaseCachedMemory() { return allocator_.ReleaseIdle(); }

  // OK, or the sticky error every call on this device now returns.
  absl::Status sticky_error() const;

  // --- For the backend and buffers of this device. ---

  // Converts a CUDA result; an error that ruins the context becomes the
  // device's sticky error.
  absl::Status Check(cudaError_t error, absl::string_view context);
  // Makes this device current on the calling thread.
  absl::Status MakeCurrent();
  cuda_internal::CachingAllocator& allocator() { return allocator_; }
  cuda_internal::CompletionPoller& poller() { return *poller_; }
  // A timing-free event from the pool, and its return.
  absl::StatusOr<cudaEvent_t> AcquireEvent();
  void ReleaseEvent(cudaEvent_t event);
  // Fences on every stream of every live backend of this device, for
  // memory freed outside any one stream.
  cuda_internal::FenceList RecordFencesOnAllStreams();

 private:
  friend class CudaBackend;
  class RawMemory : public cuda_internal::RawDeviceMemory {
   public:
    explicit RawMemory(CudaDevice& device) : device_(device) {}
    absl::StatusOr<void*> Allocate(size_t size) override;
    void Free(void* ptr) override;

   private:
    CudaDevice& device_;
  };

  explicit CudaDevice(CudaDeviceInfo info);
  void AddBackend(CudaBackend* backend);
  void RemoveBackend(CudaBackend* backend);

  const CudaDeviceInfo info_;
  const std::string name_;
  CudaBufferType buffer_type_;
  CudaPinnedBufferType pinned_type_;
  RawMemory raw_memory_;
  cuda_internal::CachingAllocator allocator_;
  std::unique_ptr<cuda_internal::CompletionPoller> poller_;

  mutable std::mutex mu_;
  absl::Status sticky_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaEvent_t> free_events_ ABSL_GUARDED_BY(mu_);
  std::vector<CudaBackend*> backends_ ABSL_GUARDED_BY(mu_);
};

// True for CUDA errors after which the context is unusable (the process must
// restart to use the GPU again).
bool IsStickyCudaError(cudaError_t error);

// Creates a device per GPU and registers it ("cuda0", ...), enabling peer
// access between GPUs that allow it. Returns how many were registered, or
// Unavailable with the reason when there are none. Safe to call again
// (already registered names are skipped). Touches the driver: call it only
// when CUDA devices are wanted.
absl::StatusOr<int> RegisterCudaDevices(Registry& registry);

// Registers the device family "cuda" (nothing if it is there already):
// cudaN is made when a device list or AddDevice asks for it, so programs
// that never name a CUDA device never touch the driver.
absl::Status RegisterCudaFamily(Registry& registry);

}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_CUDA_DEVICE_H_
