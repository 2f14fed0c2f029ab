// The CUDA runtime API's entry points of the fake (fake_cuda_control.h): the
// subset ferry calls, with C linkage and the toolkit headers' signatures, on
// the state of internal/runtime_state.h. Also nvcc's launch and registration
// hooks (__cudaRegisterFunction, __cudaPushCallConfiguration, ...), so
// objects compiled by nvcc link and launch their kernels here.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/backends/cuda/testing/internal/device_memory.h"
#include "ferry/backends/cuda/testing/internal/error_names.h"
#include "ferry/backends/cuda/testing/internal/kernel_registry.h"
#include "ferry/backends/cuda/testing/internal/runtime_state.h"

namespace ferry::fake_cuda_internal {
namespace {

Runtime& R() { return Runtime::Get(); }

int Current() { return ThisThread().device; }

bool IsDevice(const PointerInfo& info) {
  return info.kind == PointerKind::kDevice;
}

const char* KindName(const PointerInfo& info) {
  switch (info.kind) {
    case PointerKind::kDevice:
      return "device memory";
    case PointerKind::kDeviceOverrun:
      return "a range running past the end of a device allocation";
    case PointerKind::kFreed:
      return "FREED device memory";
    case PointerKind::kPinned:
      return "pinned host memory";
    case PointerKind::kPageable:
      return "pageable host memory";
  }
  return "?";
}

// The host address of `p` for the fake's engines (device memory through
// its alias), or nullptr if device memory vanished.
void* EngineAddress(const void* p, size_t bytes, const PointerInfo& info) {
  if (IsDevice(info)) return R().memory().Translate(p, bytes);
  return const_cast<void*>(p);
}

// The race-check ranges of one side of a copy (device and pinned memory;
// pageable memory is staged or waited for, never touched asynchronously).
void AddAccess(std::vector<AccessRange>& accesses, const void* p, size_t bytes,
               const PointerInfo& info, bool write) {
  if (info.kind != PointerKind::kDevice && info.kind != PointerKind::kPinned) {
    return;
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  accesses.push_back(AccessRange{begin, begin + bytes, write});
}

const char* KindLabel(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return "h2h";
    case cudaMemcpyHostToDevice:
      return "h2d";
    case cudaMemcpyDeviceToHost:
      return "d2h";
    case cudaMemcpyDeviceToDevice:
      return "d2d";
    default:
      return "default";
  }
}

// cudaMemcpy (stream == nullptr: the legacy stream, synchronous call) and
// cudaMemcpyAsync, with CUDA's documented host synchronization:
//   pageable -> device: waits for the stream's earlier work, stages the
//     bytes and returns; the DMA may still be in flight (also for the
//     synchronous call);
//   device -> pageable: returns once the copy is done;
//   pinned <-> device, device <-> device: async calls return at once; the
//     synchronous call waits, except device -> device;
//   host -> host: done on the calling thread.
cudaError_t Copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                 cudaStream_t stream_handle, bool synchronous,
                 const char* api) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) {
    return R().Fail(cudaErrorInvalidValue, absl::StrCat(api, ": null pointer"));
  }
  const PointerInfo d = R().memory().Classify(dst, count);
  const PointerInfo s = R().memory().Classify(src, count);
  struct Side {
    const PointerInfo& info;
    const void* p;
    const char* name;
  };
  for (const Side& side :
       {Side{d, dst, "destination"}, Side{s, src, "source"}}) {
    if (side.info.kind == PointerKind::kFreed ||
        side.info.kind == PointerKind::kDeviceOverrun) {
      return R().Fail(
          cudaErrorInvalidValue,
          absl::StrCat(api, ": the ", side.name, " is ", KindName(side.info),
                       ": ", R().memory().Describe(side.p)));
    }
  }
  const bool dst_device = IsDevice(d);
  const bool src_device = IsDevice(s);
  bool kind_ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      kind_ok = !src_device && !dst_device;
      break;
    case cudaMemcpyHostToDevice:
      kind_ok = !src_device && dst_device;
      break;
    case cudaMemcpyDeviceToHost:
      kind_ok = src_device && !dst_device;
      break;
    case cudaMemcpyDeviceToDevice:
      kind_ok = src_device && dst_device;
      break;
    case cudaMemcpyDefault:
      break;
    default:
      kind_ok = false;
  }
  if (!kind_ok) {
    return R().Fail(cudaErrorInvalidValue,
                    absl::StrCat(api, "(", KindLabel(kind), ", ", count,
                                 " bytes): the source is ", KindName(s),
                                 " and the destination ", KindName(d)));
  }
  cudaError_t error = cudaSuccess;
  CUstream_st* stream = R().Resolve(stream_handle, &error);
  if (stream == nullptr) return R().Fail(error);
  const int device = stream->device;
  if (cudaError_t sticky = R().Sticky(device); sticky != cudaSuccess) {
    return R().Fail(sticky);
  }
  for (const PointerInfo* info : {&d, &s}) {
    if (IsDevice(*info) && R().Sticky(info->device) != cudaSuccess) {
      return R().Fail(R().Sticky(info->device));
    }
  }
  if (!src_device && !dst_device) {
    stream->progress->WaitFor(R().Mark(stream, "host copy point"));
    std::memmove(dst, src, count);
    return cudaSuccess;
  }
  const bool pageable_src = !src_device && s.kind == PointerKind::kPageable;
  const bool pageable_dst = !dst_device && d.kind == PointerKind::kPageable;
  Op op;
  op.is_copy = true;
  op.label = absl::StrCat(api, "(", src_device ? "d" : "h", "2",
                          dst_device ? "d" : "h", ", ", count, " bytes)");
  AddAccess(op.accesses, src, count, s, /*write=*/false);
  AddAccess(op.accesses, dst, count, d, /*write=*/true);
  if (pageable_src) {
    // Staged once the stream's earlier work is done: the caller may reuse
    // its memory when this returns.
    stream->progress->WaitFor(R().Mark(stream, "staging point"));
    auto staging = std::make_shared<std::vector<char>>(
        static_cast<const char*>(src), static_cast<const char*>(src) + count);
    op.body = [staging, dst, count, d]() -> cudaError_t {
      void* to = EngineAddress(dst, count, d);
      if (to == nullptr) return cudaErrorIllegalAddress;
      std::memcpy(to, staging->data(), count);
      return cudaSuccess;
    };
  } else {
    op.body = [dst, src, count, d, s]() -> cudaError_t {
      void* to = EngineAddress(dst, count, d);
      const void* from = EngineAddress(src, count, s);
      if (to == nullptr || from == nullptr) return cudaErrorIllegalAddress;
      std::memmove(to, from, count);
      return cudaSuccess;
    };
  }
  const uint64_t seq = R().Enqueue(stream, std::move(op));
  const bool wait = pageable_dst || (synchronous && !pageable_src &&
                                     !(src_device && dst_device));
  if (wait) {
    stream->progress->WaitFor(seq);
    if (cudaError_t sticky = R().Sticky(device); sticky != cudaSuccess) {
      return R().Fail(sticky);
    }
  }
  return cudaSuccess;
}

cudaError_t Set(void* dst, int value, size_t count, cudaStream_t stream_handle,
                const char* api) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (count == 0) return cudaSuccess;
  const PointerInfo d = R().memory().Classify(dst, count);
  if (!IsDevice(d)) {
    return R().Fail(cudaErrorInvalidValue,
                    absl::StrCat(api, ": the destination is ", KindName(d),
                                 ": ", R().memory().Describe(dst)));
  }
  cudaError_t error = cudaSuccess;
  CUstream_st* stream = R().Resolve(stream_handle, &error);
  if (stream == nullptr) return R().Fail(error);
  if (cudaError_t sticky = R().Sticky(stream->device); sticky != cudaSuccess) {
    return R().Fail(sticky);
  }
  Op op;
  op.is_copy = true;
  op.label = absl::StrCat(api, "(", count, " bytes)");
  AddAccess(op.accesses, dst, count, d, /*write=*/true);
  op.body = [dst, value, count, d]() -> cudaError_t {
    void* to = EngineAddress(dst, count, d);
    if (to == nullptr) return cudaErrorIllegalAddress;
    std::memset(to, value, count);
    return cudaSuccess;
  };
  // Asynchronous for device memory, even cudaMemset.
  R().Enqueue(stream, std::move(op));
  return cudaSuccess;
}

}  // namespace
}  // namespace ferry::fake_cuda_internal

using ::ferry::fake_cuda_internal::Current;
using ::ferry::fake_cuda_internal::Op;
using ::ferry::fake_cuda_internal::PointerInfo;
using ::ferry::fake_cuda_internal::PointerKind;
using ::ferry::fake_cuda_internal::R;
using ::ferry::fake_cuda_internal::ThisThread;

extern "C" {

// --- Errors and versions. ---

const char* cudaGetErrorName(cudaError_t error) {
  const char* name = ferry::fake_cuda_internal::ErrorName(error);
  return name != nullptr ? name : "cudaErrorUnrecognized";
}

const char* cudaGetErrorString(cudaError_t error) {
  const char* text = ferry::fake_cuda_internal::ErrorDescription(error);
  return text != nullptr ? text : "unrecognized error code";
}

cudaError_t cudaGetLastError(void) { return R().LastError(/*clear=*/true); }

cudaError_t cudaPeekAtLastError(void) { return R().LastError(/*clear=*/false); }

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return R().Fail(cudaErrorInvalidValue);
  *version = R().config().driver_version;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return R().Fail(cudaErrorInvalidValue);
  *version = ferry::fake_cuda::kRuntimeVersion;
  return cudaSuccess;
}

// --- Devices. ---

cudaError_t cudaGetDeviceCount(int* count) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) {
    if (count != nullptr) *count = 0;
    return error;
  }
  if (count == nullptr) return R().Fail(cudaErrorInvalidValue);
  *count = R().config().device_count;
  if (*count == 0) return R().Fail(cudaErrorNoDevice);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (!R().ValidDevice(device)) return R().Fail(cudaErrorInvalidDevice);
  ThisThread().device = device;
  // Since CUDA 12.0, cudaSetDevice initializes the device's context. It
  // does not report a ruined one (it only picks the device; the context
  // stays "active"): modelled the strict way, so code must find a sticky
  // error from the calls that do work.
  R().TouchContext(device);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (device == nullptr) return R().Fail(cudaErrorInvalidValue);
  *device = Current();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (prop == nullptr) return R().Fail(cudaErrorInvalidValue);
  if (!R().ValidDevice(device)) return R().Fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name),
                "ferry fake GPU %d (no hardware)", device);
  prop->totalGlobalMem = R().config().memory_bytes;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  prop->asyncEngineCount = 2;
  prop->integrated = 0;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->sharedMemPerBlock = 48 << 10;
  prop->unifiedAddressing = 1;
  prop->pciDomainID = 0;
  prop->pciBusID = device + 1;
  prop->pciDeviceID = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr,
                                   int device) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (value == nullptr) return R().Fail(cudaErrorInvalidValue);
  if (!R().ValidDevice(device)) return R().Fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrHostRegisterSupported:
    case cudaDevAttrHostRegisterReadOnlySupported:
    case cudaDevAttrUnifiedAddressing:
      *value = 1;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = 4;
      return cudaSuccess;
    default:
      return R().Fail(
          cudaErrorInvalidValue,
          absl::StrCat("cudaDeviceGetAttribute(", attr, ") is not modelled"));
  }
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (bus_id == nullptr || len <= 0) return R().Fail(cudaErrorInvalidValue);
  if (!R().ValidDevice(device)) return R().Fail(cudaErrorInvalidDevice);
  std::snprintf(bus_id, static_cast<size_t>(len), "0000:%02x:00.0", device + 1);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const int device = Current();
  if (cudaError_t error = R().EnterDevice(device); error != cudaSuccess) {
    return error;
  }
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return R().Fail(cudaErrorInvalidValue);
  }
  R().TouchContext(device);
  *total_bytes = R().config().memory_bytes;
  *free_bytes = *total_bytes - R().Used(device);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (can == nullptr) return R().Fail(cudaErrorInvalidValue);
  if (!R().ValidDevice(device) || !R().ValidDevice(peer)) {
    return R().Fail(cudaErrorInvalidDevice);
  }
  *can = R().CanAccessPeer(device, peer) ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  const int device = Current();
  if (cudaError_t error = R().EnterDevice(device); error != cudaSuccess) {
    return error;
  }
  if (!R().ValidDevice(peer) || peer == device) {
    return R().Fail(cudaErrorInvalidDevice);
  }
  if (flags != 0) return R().Fail(cudaErrorInvalidValue);
  R().TouchContext(device);
  return R().Fail(R().EnablePeer(device, peer));
}

cudaError_t cudaDeviceSynchronize(void) {
  const int device = Current();
  if (cudaError_t error = R().EnterDevice(device); error != cudaSuccess) {
    return error;
  }
  R().device_synchronizes().fetch_add(1);
  R().TouchContext(device);
  R().WaitDevice(device);
  return R().Fail(R().Sticky(device));
}

// --- Memory. ---

cudaError_t cudaMalloc(void** ptr, size_t size) {
  const int device = Current();
  if (cudaError_t error = R().EnterDevice(device); error != cudaSuccess) {
    return error;
  }
  if (ptr == nullptr) return R().Fail(cudaErrorInvalidValue);
  R().TouchContext(device);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  if (R().AllocationFails() || !R().Reserve(device, size)) {
    R().failed_mallocs().fetch_add(1);
    return R().Fail(cudaErrorMemoryAllocation);
  }
  absl::StatusOr<void*> memory = R().memory().Allocate(device, size);
  if (!memory.ok()) {
    R().Release(device, size);
    return R().Fail(cudaErrorMemoryAllocation, memory.status().message());
  }
  R().mallocs().fetch_add(1);
  *ptr = *memory;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  const int device = Current();
  if (cudaError_t error = R().EnterDevice(device); error != cudaSuccess) {
    return error;
  }
  R().TouchContext(device);
  if (ptr == nullptr) return cudaSuccess;
  const PointerInfo info = R().memory().Classify(ptr, 1);
  if (info.kind != PointerKind::kDevice ||
      info.base != reinterpret_cast<uintptr_t>(ptr)) {
    return R().Fail(cudaErrorInvalidValue,
                    absl::StrCat("cudaFree of ", R().memory().Describe(ptr)));
  }
  // cudaFree synchronizes the device first (so freeing memory that work in
  // flight uses is safe here; what the caching allocator hands out again
  // without cudaFree is checked by the race check instead).
  R().WaitDevice(info.device);
  int owner = 0;
  size_t size = 0;
  if (!R().memory().Free(ptr, &owner, &size)) {
    return R().Fail(cudaErrorInvalidValue);
  }
  R().Release(owner, size);
  R().frees().fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  const int device = Current();
  if (cudaError_t error = R().EnterDevice(device); error != cudaSuccess) {
    return error;
  }
  if (ptr == nullptr || size == 0 ||
      (flags & ~(cudaHostAllocPortable | cudaHostAllocMapped |
                 cudaHostAllocWriteCombined)) != 0) {
    return R().Fail(cudaErrorInvalidValue);
  }
  R().TouchContext(device);
  absl::StatusOr<void*> memory = R().memory().AllocateHost(size);
  if (!memory.ok()) {
    return R().Fail(cudaErrorMemoryAllocation, memory.status().message());
  }
  *ptr = *memory;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (ptr == nullptr) return cudaSuccess;
  const PointerInfo info = R().memory().Classify(ptr, 1);
  if (info.kind == PointerKind::kPinned) {
    R().CheckFreeWhileInFlight(ptr, info.size, "cudaFreeHost");
  }
  if (!R().memory().FreeHost(ptr)) {
    return R().Fail(cudaErrorInvalidValue,
                    "cudaFreeHost of memory cudaHostAlloc did not return");
  }
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  const int device = Current();
  if (cudaError_t error = R().EnterDevice(device); error != cudaSuccess) {
    return error;
  }
  if (ptr == nullptr || size == 0 ||
      (flags & ~(cudaHostRegisterPortable | cudaHostRegisterMapped |
                 cudaHostRegisterIoMemory | cudaHostRegisterReadOnly)) != 0) {
    return R().Fail(cudaErrorInvalidValue);
  }
  R().TouchContext(device);
  if (cudaError_t injected = R().HostRegisterFault(); injected != cudaSuccess) {
    return R().Fail(injected, "injected at cudaHostRegister");
  }
  absl::Status status =
      R().memory().Register(ptr, size, (flags & cudaHostRegisterReadOnly) != 0);
  if (absl::IsAlreadyExists(status)) {
    return R().Fail(cudaErrorHostMemoryAlreadyRegistered);
  }
  if (absl::IsPermissionDenied(status)) {
    // Pinning read-only pages without cudaHostRegisterReadOnly fails.
    return R().Fail(cudaErrorNotPermitted);
  }
  if (!status.ok()) return R().Fail(cudaErrorInvalidValue, status.message());
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  const PointerInfo info = R().memory().Classify(ptr, 1);
  if (info.kind == PointerKind::kPinned &&
      info.base == reinterpret_cast<uintptr_t>(ptr)) {
    R().CheckFreeWhileInFlight(ptr, info.size, "cudaHostUnregister");
  }
  if (!R().memory().Unregister(ptr)) {
    return R().Fail(cudaErrorHostMemoryNotRegistered);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count,
                       enum cudaMemcpyKind kind) {
  return ferry::fake_cuda_internal::Copy(dst, src, count, kind, nullptr,
                                         /*synchronous=*/true, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream) {
  return ferry::fake_cuda_internal::Copy(dst, src, count, kind, stream,
                                         /*synchronous=*/false,
                                         "cudaMemcpyAsync");
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src,
                                int src_device, size_t count,
                                cudaStream_t stream) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (!R().ValidDevice(dst_device) || !R().ValidDevice(src_device)) {
    return R().Fail(cudaErrorInvalidDevice);
  }
  if (count > 0) {
    const PointerInfo d = R().memory().Classify(dst, count);
    const PointerInfo s = R().memory().Classify(src, count);
    if (d.kind != PointerKind::kDevice || d.device != dst_device ||
        s.kind != PointerKind::kDevice || s.device != src_device) {
      return R().Fail(
          cudaErrorInvalidValue,
          absl::StrCat("cudaMemcpyPeerAsync(cuda", src_device, " -> cuda",
                       dst_device, "): source ", R().memory().Describe(src),
                       ", destination ", R().memory().Describe(dst)));
    }
  }
  return ferry::fake_cuda_internal::Copy(
      dst, src, count, cudaMemcpyDeviceToDevice, stream,
      /*synchronous=*/false, "cudaMemcpyPeerAsync");
}

cudaError_t cudaMemset(void* dst, int value, size_t count) {
  return ferry::fake_cuda_internal::Set(dst, value, count, nullptr,
                                        "cudaMemset");
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t count,
                            cudaStream_t stream) {
  return ferry::fake_cuda_internal::Set(dst, value, count, stream,
                                        "cudaMemsetAsync");
}

// --- Streams. ---

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream,
                                      unsigned int flags) {
  const int device = Current();
  if (cudaError_t error = R().EnterDevice(device); error != cudaSuccess) {
    return error;
  }
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) {
    return R().Fail(cudaErrorInvalidValue);
  }
  *stream = R().CreateStream(device, (flags & cudaStreamNonBlocking) == 0);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (handle == nullptr || handle == cudaStreamLegacy ||
      handle == cudaStreamPerThread) {
    return R().Fail(cudaErrorInvalidResourceHandle);
  }
  cudaError_t error = cudaSuccess;
  CUstream_st* stream = R().Resolve(handle, &error);
  if (stream == nullptr) return R().Fail(error);
  R().DestroyStream(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  cudaError_t error = cudaSuccess;
  CUstream_st* stream = R().Resolve(handle, &error);
  if (stream == nullptr) return R().Fail(error);
  R().WaitStream(stream);
  return R().Fail(R().Sticky(stream->device));
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  cudaError_t error = cudaSuccess;
  CUstream_st* stream = R().Resolve(handle, &error);
  if (stream == nullptr) return R().Fail(error);
  if (cudaError_t sticky = R().Sticky(stream->device); sticky != cudaSuccess) {
    return R().Fail(sticky);
  }
  if (R().NotReadyStorm() || !R().StreamIdle(stream)) {
    return R().Fail(cudaErrorNotReady);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t event,
                                unsigned int flags) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (event == nullptr || flags != 0) return R().Fail(cudaErrorInvalidValue);
  cudaError_t error = cudaSuccess;
  CUstream_st* stream = R().Resolve(handle, &error);
  if (stream == nullptr) return R().Fail(error);
  if (cudaError_t sticky = R().Sticky(stream->device); sticky != cudaSuccess) {
    return R().Fail(sticky);
  }
  // An event of another device may be waited for.
  R().WaitEvent(stream, event);
  return cudaSuccess;
}

// --- Events. ---

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  const int device = Current();
  if (cudaError_t error = R().EnterDevice(device); error != cudaSuccess) {
    return error;
  }
  if (event == nullptr ||
      (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming |
                 cudaEventInterprocess)) != 0) {
    return R().Fail(cudaErrorInvalidValue);
  }
  R().TouchContext(device);
  auto* created = new CUevent_st();
  created->device = device;
  created->flags = flags;
  *event = created;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (event == nullptr) return R().Fail(cudaErrorInvalidResourceHandle);
  delete event;  // Waits already enqueued hold what they need.
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t handle) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (event == nullptr) return R().Fail(cudaErrorInvalidResourceHandle);
  cudaError_t error = cudaSuccess;
  CUstream_st* stream = R().Resolve(handle, &error);
  if (stream == nullptr) return R().Fail(error);
  if (cudaError_t sticky = R().Sticky(stream->device); sticky != cudaSuccess) {
    return R().Fail(sticky);
  }
  if (stream->device != event->device) {
    return R().Fail(
        cudaErrorInvalidResourceHandle,
        absl::StrCat("cudaEventRecord: an event of cuda", event->device,
                     " on a stream of cuda", stream->device));
  }
  R().RecordEvent(event, stream);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (event == nullptr) return R().Fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t sticky = R().Sticky(event->device); sticky != cudaSuccess) {
    return R().Fail(sticky);
  }
  // Not ready is an error result: it is recorded as the last error.
  if (R().NotReadyStorm() || !R().EventDone(event)) {
    return R().Fail(cudaErrorNotReady);
  }
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (cudaError_t error = R().Enter(); error != cudaSuccess) return error;
  if (event == nullptr) return R().Fail(cudaErrorInvalidResourceHandle);
  R().WaitEventDone(event);
  return R().Fail(R().Sticky(event->device));
}

// --- Kernels. ---

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block,
                             void** args, size_t shared_bytes,
                             cudaStream_t stream) {
  return R().Launch(func, grid, block, args, shared_bytes, stream);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config,
                                const void* func, void** args) {
  if (config == nullptr) return R().Fail(cudaErrorInvalidValue);
  return R().Launch(func, config->gridDim, config->blockDim, args,
                    config->dynamicSmemBytes, config->stream);
}

// nvcc's hooks: kernel registration at static initialization, and the
// <<<...>>> launch sequence (push the configuration, then the kernel's stub
// pops it and launches).

void** __cudaRegisterFatBinary(void* /*fat_cubin*/) {
  static void* handle = nullptr;
  return &handle;
}

void __cudaRegisterFatBinaryEnd(void** /*handle*/) {}

void __cudaUnregisterFatBinary(void** /*handle*/) {}

void __cudaRegisterFunction(void** /*handle*/, const char* host_fun,
                            char* /*device_fun*/, const char* device_name,
                            int /*thread_limit*/, uint3* /*tid*/,
                            uint3* /*bid*/, dim3* /*block_dim*/,
                            dim3* /*grid_dim*/, int* /*warp_size*/) {
  ferry::fake_cuda_internal::KernelRegistry::Get().AddFunction(host_fun,
                                                               device_name);
}

void __cudaRegisterVar(void** /*handle*/, char* /*host_var*/,
                       char* /*device_address*/, const char* device_name,
                       int /*ext*/, size_t /*size*/, int /*constant*/,
                       int /*global*/) {
  std::fprintf(stderr,
               "fake CUDA: device variable %s is not modelled (kernels see "
               "its host copy's address)\n",
               device_name);
}

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared,
                                     struct CUstream_st* stream) {
  ThisThread().configs.push_back({grid, block, shared, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared,
                                       void* stream) {
  auto& configs = ThisThread().configs;
  if (configs.empty()) return cudaErrorInvalidConfiguration;
  *grid = configs.back().grid;
  *block = configs.back().block;
  *shared = configs.back().shared_bytes;
  *static_cast<cudaStream_t*>(stream) = configs.back().stream;
  configs.pop_back();
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(func));
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block,
                               void** args, size_t shared_bytes,
                               cudaStream_t stream) {
  return R().Launch(reinterpret_cast<const void*>(kernel), grid, block, args,
                    shared_bytes, stream);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block,
                                    void** args, size_t shared_bytes,
                                    cudaStream_t stream) {
  return __cudaLaunchKernel(kernel, grid, block, args, shared_bytes, stream);
}

}  // extern "C"
