// CudaDevice: one CUDA GPU, its buffer types and shared machinery.
//
// Devices are made by an explicit registration (RegisterCudaFamily makes
// cudaN when a device list names it; RegisterCudaDevices makes all). Making
// one only reads the GPU's properties: its CUDA context, the completion
// poller thread and peer access are set up by the first use (a backend,
// an allocation, a buffer over host memory), and peer access between two
// GPUs by the first copy between them. No call changes the calling thread's
// current CUDA device for longer than it runs (CudaDevice::Scope), and none
// leaves a CUDA error of its own pending in the thread's last-error slot.
// Without a driver or GPU the registry has no CUDA device and the reason
// is printed once (cuda_probe.h).
//
// A device owns what its backends (streams) share:
//   - device memory through a stream-ordered caching pool
//     (internal/caching_allocator.h): freeing a buffer records fences after
//     the work enqueued so far on every CUDA backend of the process (peer
//     copies read a GPU's memory from another GPU's streams), including
//     work still held on the host behind an event, so its memory is handed
//     out again only once nothing can touch it, without cudaFree's
//     device-wide synchronization;
//   - synchronous buffer transfers (Buffer::SetTensor and friends) on
//     pooled non-blocking streams, complete when they return;
//   - pinned host buffers (cudaHostAlloc, portable to every GPU) and
//     buffers over registered host memory (cudaHostRegister); destroying
//     one blocks until the copies enqueued so far on every CUDA backend
//     ran, those held on the host behind an event too (so the event must
//     be able to complete without the destroying thread);
//   - a pool of timing-free CUDA events and the completion poller thread
//     that turns their completion into timeline signals;
//   - the sticky error: after an error that ruins the CUDA context (illegal
//     address, launch failure, ...), every later call on the device returns
//     it. Other errors fail only the backend that met them.
#ifndef FERRY_BACKENDS_CUDA_CUDA_DEVICE_H_
#define FERRY_BACKENDS_CUDA_CUDA_DEVICE_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cuda/cuda_event_pool.h"
#include "ferry/backends/device.h"
#include "ferry/backends/event.h"
#include "ferry/backends/registry.h"
#include "ferry/graph/tensor.h"

namespace ferry {

class CudaBackend;
class CudaDevice;
namespace cuda_internal {
class CachingAllocator;
class CompletionPoller;
class Fence;
}  // namespace cuda_internal

// The counters of a device's caching pool of memory.
struct CudaMemoryStats {
  size_t allocated_bytes = 0;  // In blocks handed out.
  size_t cached_bytes = 0;     // In free blocks kept.
  size_t peak_bytes = 0;       // Peak of allocated + cached.
  int64_t hits = 0;            // Requests served from the cache.
  int64_t misses = 0;          // Requests that allocated from CUDA.
  int64_t releases = 0;        // Cached blocks given back to CUDA.
  int64_t oom_retries = 0;     // Out-of-memory retries after releasing.
};

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
  // Describes GPU `ordinal` (as numbered by the CUDA runtime) without
  // creating its context. Unavailable without a driver or such a GPU.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int ordinal);
  // Every backend and buffer of the device must be destroyed first.
  ~CudaDevice() override;

  absl::string_view name() const override { return name_; }
  // Until the device is first used, memory_free is its total memory (the
  // free memory is only known to a context).
  DeviceProps props() const override;
  const CudaDeviceInfo& info() const { return info_; }
  int ordinal() const { return info_.ordinal; }
  // True once the device was first used (its CUDA context exists).
  bool initialized() const {
    return initialized_.load(std::memory_order_acquire);
  }

  // `params`: empty, or "tf32=1" to let f32 x f32 GEMMs use TF32 tensor
  // cores (faster, about 1e-3 relative error per product; "tf32=0", the
  // default, keeps full f32); anything else is InvalidArgument.
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
      absl::string_view params = "") override;
  BufferType* default_buffer_type() override { return &buffer_type_; }
  BufferType* host_buffer_type() override { return &pinned_type_; }
  // Registers `data` (64-byte aligned) with CUDA (cudaHostRegister) for
  // async copies; the buffer unregisters it when destroyed. Memory whose
  // pages are registered already (an overlapping buffer) is used as it is;
  // read-only pages (a read-only mmap) are registered read-only and the
  // buffer refuses writes. The caller keeps `data` alive.
  absl::StatusOr<std::unique_ptr<Buffer>> BufferFromHostPointer(
      void* data, size_t size) override;

  // Exactly the ops the CUDA kernels implement (the same contract as the
  // CPU kernels' CheckSupported), block-quantized weights only as
  // mul_mat's a (every block dtype: cuda_kernels::ReadsWeightsOf).
  absl::Status CheckOp(const Tensor& node) const override;
  // Kernels read and write this device's memory only.
  bool SupportsBufferType(const BufferType* type) const override;
  // Worth moving a host-resident weight here for batches of 32 or more.
  bool OffloadOp(const Tensor& node) const override;
  // kDevice for complete events and for CUDA backends' events (of any GPU
  // of this process) whose record was issued: cudaStreamWaitEvent. kHost
  // otherwise: later work is held on the host until the event completes.
  EventWaitMode WaitMode(const Event& event) const override;

  // The caching pool's counters.
  CudaMemoryStats memory_stats() const;
  // Gives idle cached blocks back to CUDA; returns the bytes released.
  size_t ReleaseCachedMemory();

  // OK, or the sticky error every call on this device now returns.
  absl::Status sticky_error() const;

  // --- For the backends and buffers of CUDA devices. ---

  // Makes the device current on the calling thread for its lifetime and
  // restores the thread's previous device afterwards; marks the device
  // used. Thread-compatible (one per scope).
  class Scope {
   public:
    explicit Scope(CudaDevice& device);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    // OK, or why the device could not be made current.
    const absl::Status& status() const { return status_; }

   private:
    int previous_ = -1;
    bool switched_ = false;
    absl::Status status_;
  };

  // Converts a CUDA result, taking it out of the thread's last-error slot;
  // an error that ruins the context becomes the device's sticky error.
  absl::Status Check(cudaError_t error, absl::string_view context);
  // After a failed launch or cuBLAS call (`status`): the sticky error if
  // the context is ruined now (recorded), else `status`.
  absl::Status CheckLaunch(absl::Status status);

  cuda_internal::CachingAllocator& allocator() { return *allocator_; }
  // Started by the first call.
  cuda_internal::CompletionPoller& poller();
  // A timing-free event of this device (its context must be current).
  absl::StatusOr<std::shared_ptr<PooledCudaEvent>> AcquireEvent();
  // Fences after the work enqueued so far on every CUDA backend of the
  // process, for memory of this device freed outside any one stream.
  std::vector<std::shared_ptr<cuda_internal::Fence>> FencesForFree();
  // Lets this device's kernels and copies reach `peer`'s memory directly
  // (cudaDeviceEnablePeerAccess), once; nothing if the GPUs cannot (copies
  // then go through the host). This device must be current.
  void EnablePeerAccessTo(int peer);
  // Runs a transfer `enqueue`d on a pooled non-blocking stream of this
  // device and waits for it: a synchronous buffer operation, complete when
  // this returns, that no other stream's work waits for or delays.
  absl::Status Transfer(absl::string_view what,
                        absl::FunctionRef<cudaError_t(cudaStream_t)> enqueue);

 private:
  friend class CudaBackend;
  // The caching pool's source of memory (cudaMalloc/cudaFree).
  class RawMemory;

  explicit CudaDevice(CudaDeviceInfo info);
  // Every CUDA backend of the process, for FencesForFree.
  static void AddBackend(CudaBackend* backend);
  static void RemoveBackend(CudaBackend* backend);

  const CudaDeviceInfo info_;
  const std::string name_;
  CudaBufferType buffer_type_;
  CudaPinnedBufferType pinned_type_;
  const std::unique_ptr<RawMemory> raw_memory_;
  const std::unique_ptr<cuda_internal::CachingAllocator> allocator_;
  const std::shared_ptr<CudaEventPool> events_;
  std::atomic<bool> initialized_{false};

  std::once_flag poller_once_;
  std::unique_ptr<cuda_internal::CompletionPoller> poller_;

  mutable std::mutex mu_;
  absl::Status sticky_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaStream_t> transfer_streams_ ABSL_GUARDED_BY(mu_);  // Idle.
  std::set<int> peers_ ABSL_GUARDED_BY(mu_);  // Peer access attempted.
};

// True for CUDA errors after which the context is unusable (the process must
// restart to use the GPU again).
bool IsStickyCudaError(cudaError_t error);

// Creates a device per GPU and registers it ("cuda0", ...). Returns how many
// were registered, or Unavailable with the reason when there are none. Safe
// to call again (already registered names are skipped). Reads the GPUs'
// properties only: no context is created and no peer access enabled until
// a device is used.
absl::StatusOr<int> RegisterCudaDevices(Registry& registry);

// Registers the device family "cuda" (nothing if it is there already):
// cudaN is made when a device list or AddDevice asks for it, so programs
// that never name a CUDA device never touch the driver.
absl::Status RegisterCudaFamily(Registry& registry);

}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_CUDA_DEVICE_H_
