#include "ferry/backends/cuda/cuda_device.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/backends/cuda/cuda_backend.h"
#include "ferry/backends/cuda/cuda_native_event.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/cuda/cuda_status.h"
#include "ferry/backends/cuda/internal/caching_allocator.h"
#include "ferry/backends/cuda/internal/completion_poller.h"
#include "ferry/backends/cuda/kernels/cuda_kernels.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

// Batches at least this large are worth moving a weight to the GPU for
// (ggml's min_batch_size).
constexpr int64_t kMinOffloadBatch = 32;

// Device memory from the caching pool. Freeing records fences after the
// work enqueued so far on every CUDA backend, so the pool reuses the memory
// only once nothing can touch it. Synchronous transfers run on the
// device's transfer streams and are complete when they return.
class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(CudaBufferType* type, CudaDevice& device,
             cuda_internal::CachingAllocator::Block block, size_t size)
      : Buffer(type, block.ptr, size), device_(device), block_(block) {}
  ~CudaBuffer() override {
    device_.allocator().Free(block_, cuda_internal::kNoStream, nullptr,
                             device_.FencesForFree());
  }

  absl::Status SetTensor(Tensor& tensor, const void* data, size_t offset,
                         size_t size) override {
    void* to = static_cast<char*>(tensor.data) + offset;
    return device_.Transfer(
        absl::StrCat("cudaMemcpyAsync(h2d, ", size, " bytes)"),
        [&](cudaStream_t s) {
          return cudaMemcpyAsync(to, data, size, cudaMemcpyHostToDevice, s);
        });
  }
  absl::Status GetTensor(const Tensor& tensor, void* data, size_t offset,
                         size_t size) override {
    const void* from = static_cast<const char*>(tensor.data) + offset;
    return device_.Transfer(
        absl::StrCat("cudaMemcpyAsync(d2h, ", size, " bytes)"),
        [&](cudaStream_t s) {
          return cudaMemcpyAsync(data, from, size, cudaMemcpyDeviceToHost, s);
        });
  }
  absl::Status MemsetTensor(Tensor& tensor, uint8_t value, size_t offset,
                            size_t size) override {
    void* to = static_cast<char*>(tensor.data) + offset;
    return device_.Transfer(
        absl::StrCat("cudaMemsetAsync(", size, " bytes)"),
        [&](cudaStream_t s) { return cudaMemsetAsync(to, value, size, s); });
  }
  // Any source: host memory, this GPU or a peer (unified addressing).
  absl::Status CopyTensorFrom(const Tensor& src, Tensor& dst) override {
    const size_t bytes = static_cast<size_t>(src.NumBytes());
    if (!src.buffer->is_host() &&
        dynamic_cast<CudaDevice*>(src.buffer->type()->device()) == nullptr) {
      return absl::UnimplementedError(absl::StrCat("no direct copy from ",
                                                   src.buffer->type()->name(),
                                                   " to ", type()->name()));
    }
    return device_.Transfer(absl::StrCat("cudaMemcpyAsync(", bytes,
                                         " bytes into ", type()->name(), ")"),
                            [&](cudaStream_t s) {
                              return cudaMemcpyAsync(dst.data, src.data, bytes,
                                                     cudaMemcpyDefault, s);
                            });
  }
  absl::Status Clear(uint8_t value) override {
    return device_.Transfer("cudaMemsetAsync(clear)", [&](cudaStream_t s) {
      return cudaMemsetAsync(base(), value, size(), s);
    });
  }

 private:
  CudaDevice& device_;
  cuda_internal::CachingAllocator::Block block_;
};

// Pinned or registered host memory: host code reads it directly (through
// the plain host buffer it wraps); the GPU copies it by DMA.
class CudaHostBuffer final : public Buffer {
 public:
  enum class Kind {
    kAllocated,   // cudaHostAlloc: cudaFreeHost when destroyed.
    kRegistered,  // cudaHostRegister: cudaHostUnregister when destroyed.
    kBorrowed,    // Pinned by an earlier registration, which stays.
  };

  CudaHostBuffer(BufferType* type, CudaDevice& device,
                 std::unique_ptr<Buffer> host, Kind kind, bool read_only)
      : Buffer(type, host->base(), host->size()),
        device_(device),
        host_(std::move(host)),
        kind_(kind),
        read_only_(read_only) {}
  ~CudaHostBuffer() override {
    // Copies enqueued so far may still read or write the memory: wait for
    // them before it is unpinned or freed, those still held on the host
    // behind an event included (until that event lets them be issued).
    for (const std::shared_ptr<cuda_internal::Fence>& fence :
         device_.FencesForFree()) {
      fence->WaitIncludingHeld();
    }
    void* memory = base();
    host_.reset();
    if (kind_ == Kind::kAllocated) {
      IgnoreCudaError(cudaFreeHost(memory));
    } else if (kind_ == Kind::kRegistered) {
      IgnoreCudaError(cudaHostUnregister(memory));
    }
  }

  absl::Status SetTensor(Tensor& tensor, const void* data, size_t offset,
                         size_t size) override {
    FERRY_RETURN_IF_ERROR(CheckWritable("SetTensor", tensor));
    return host_->SetTensor(tensor, data, offset, size);
  }
  absl::Status GetTensor(const Tensor& tensor, void* data, size_t offset,
                         size_t size) override {
    return host_->GetTensor(tensor, data, offset, size);
  }
  absl::Status MemsetTensor(Tensor& tensor, uint8_t value, size_t offset,
                            size_t size) override {
    FERRY_RETURN_IF_ERROR(CheckWritable("MemsetTensor", tensor));
    return host_->MemsetTensor(tensor, value, offset, size);
  }
  absl::Status CopyTensorFrom(const Tensor& src, Tensor& dst) override {
    FERRY_RETURN_IF_ERROR(CheckWritable("CopyTensorFrom", dst));
    return host_->CopyTensorFrom(src, dst);
  }
  absl::Status Clear(uint8_t value) override {
    if (read_only_) {
      return absl::FailedPreconditionError(
          absl::StrCat(type()->name(), ": Clear of read-only host memory"));
    }
    return host_->Clear(value);
  }

 private:
  absl::Status CheckWritable(absl::string_view what, const Tensor& tensor) {
    if (!read_only_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(type()->name(), ": ", what, " of '", tensor.name,
                     "': its host memory is read-only"));
  }

  CudaDevice& device_;
  std::unique_ptr<Buffer> host_;
  Kind kind_;
  bool read_only_;
};

// The host buffer type that registered host pointers are wrapped with.
HostBufferType& RegisteredHostType() {
  static HostBufferType* const type =
      new HostBufferType("cuda_registered_host", 64, nullptr);
  return *type;
}

int64_t BatchSize(const Tensor& node) {
  // The columns a weight is applied to: b's rows for mul_mat, the ids for
  // get_rows, else the node's rows.
  if (node.op == Op::kMulMat && node.src[1] != nullptr) {
    return node.src[1]->ne[1] * node.src[1]->ne[2] * node.src[1]->ne[3];
  }
  if (node.op == Op::kGetRows && node.src[1] != nullptr) {
    return node.src[1]->ne[0];
  }
  return node.ne[1];
}

}  // namespace

bool IsStickyCudaError(cudaError_t error) {
  // driver_types.h documents these as leaving "the process in an
  // inconsistent state" (any further CUDA work returns the same error), plus
  // the hardware errors, after which the context cannot be trusted either.
  // Not cudaErrorUnknown (999): calls answer it for failures of their own
  // (a cudaHostRegister the driver cannot pin), and a context it did ruin
  // shows as a sticky error at the next call that touches the device.
  switch (error) {
    case cudaErrorECCUncorrectable:     // 214
    case cudaErrorNvlinkUncorrectable:  // 220
    case cudaErrorContained:            // 226
    case cudaErrorIllegalAddress:       // 700
    case cudaErrorLaunchTimeout:        // 702
    case cudaErrorContextIsDestroyed:   // 709
    case cudaErrorAssert:               // 710
    case cudaErrorHardwareStackError:   // 714
    case cudaErrorIllegalInstruction:   // 715
    case cudaErrorMisalignedAddress:    // 716
    case cudaErrorInvalidAddressSpace:  // 717
    case cudaErrorInvalidPc:            // 718
    case cudaErrorLaunchFailure:        // 719
    case cudaErrorTensorMemoryLeak:     // 721
    case cudaErrorExternalDevice:       // 911
      return true;
    default:
      return false;
  }
}

// --- Buffer types. ---

Device* CudaBufferType::device() const { return &device_; }

absl::StatusOr<std::unique_ptr<Buffer>> CudaBufferType::Allocate(size_t size) {
  FERRY_RETURN_IF_ERROR(device_.sticky_error());
  FERRY_ASSIGN_OR_RETURN(
      cuda_internal::CachingAllocator::Block block,
      device_.allocator().Allocate(std::max<size_t>(size, 1),
                                   cuda_internal::kNoStream));
  return std::unique_ptr<Buffer>(
      new CudaBuffer(this, device_, block, std::max<size_t>(size, 1)));
}

Device* CudaPinnedBufferType::device() const { return &device_; }

absl::StatusOr<std::unique_ptr<Buffer>> CudaPinnedBufferType::Allocate(
    size_t size) {
  FERRY_RETURN_IF_ERROR(device_.sticky_error());
  CudaDevice::Scope scope(device_);
  FERRY_RETURN_IF_ERROR(scope.status());
  void* memory = nullptr;
  FERRY_RETURN_IF_ERROR(device_.Check(
      cudaHostAlloc(&memory, std::max<size_t>(size, 1), cudaHostAllocPortable),
      absl::StrCat("cudaHostAlloc(", size, " bytes)")));
  absl::StatusOr<std::unique_ptr<Buffer>> host =
      WrapHostMemory(&RegisteredHostType(), memory, std::max<size_t>(size, 1));
  if (!host.ok()) {
    IgnoreCudaError(cudaFreeHost(memory));
    return host.status();
  }
  return std::unique_ptr<Buffer>(
      new CudaHostBuffer(this, device_, *std::move(host),
                         CudaHostBuffer::Kind::kAllocated, false));
}

// --- Raw memory for the pool. ---

class CudaDevice::RawMemory final : public cuda_internal::RawDeviceMemory {
 public:
  explicit RawMemory(CudaDevice& device) : device_(device) {}
  absl::StatusOr<void*> Allocate(size_t size) override;
  void Free(void* ptr) override;

 private:
  CudaDevice& device_;
};

absl::StatusOr<void*> CudaDevice::RawMemory::Allocate(size_t size) {
  Scope scope(device_);
  FERRY_RETURN_IF_ERROR(scope.status());
  void* ptr = nullptr;
  FERRY_RETURN_IF_ERROR(device_.Check(
      cudaMalloc(&ptr, size), absl::StrCat("cudaMalloc(", size, " bytes)")));
  return ptr;
}

void CudaDevice::RawMemory::Free(void* ptr) {
  Scope scope(device_);
  if (scope.status().ok()) IgnoreCudaError(cudaFree(ptr));
}

// --- Device. ---

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int ordinal) {
  FERRY_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (ordinal < 0 || ordinal >= count) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA device ", ordinal, " (", count, " present)"));
  }
  // Queries that create no context.
  cudaDeviceProp prop;
  const cudaError_t error = cudaGetDeviceProperties(&prop, ordinal);
  IgnoreCudaError(error);
  FERRY_RETURN_IF_ERROR(CudaToStatus(error, "cudaGetDeviceProperties"));
  CudaDeviceInfo info;
  info.ordinal = ordinal;
  info.gpu_name = prop.name;
  char bus_id[32] = {};
  const cudaError_t bus_error =
      cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), ordinal);
  IgnoreCudaError(bus_error);
  if (bus_error == cudaSuccess) {
    info.pci_bus_id = bus_id;
  } else {
    info.pci_bus_id = absl::StrFormat("%04x:%02x:%02x.0", prop.pciDomainID,
                                      prop.pciBusID, prop.pciDeviceID);
  }
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.integrated = prop.integrated != 0;
  info.async_engines = prop.asyncEngineCount;
  return std::unique_ptr<CudaDevice>(new CudaDevice(std::move(info)));
}

CudaDevice::CudaDevice(CudaDeviceInfo info)
    : info_(std::move(info)),
      name_(absl::StrCat("cuda", info_.ordinal)),
      buffer_type_(*this, name_),
      pinned_type_(*this, absl::StrCat(name_, "_pinned")),
      raw_memory_(std::make_unique<RawMemory>(*this)),
      allocator_(
          std::make_unique<cuda_internal::CachingAllocator>(raw_memory_.get())),
      events_(std::make_shared<CudaEventPool>(info_.ordinal)) {}

CudaDevice::~CudaDevice() {
  poller_.reset();  // Delivers what is pending.
  std::lock_guard<std::mutex> lock(mu_);
  if (!transfer_streams_.empty()) {
    Scope scope(*this);
    for (cudaStream_t s : transfer_streams_) {
      IgnoreCudaError(cudaStreamDestroy(s));
    }
  }
}

CudaDevice::Scope::Scope(CudaDevice& device) {
  device.initialized_.store(true, std::memory_order_release);
  cudaError_t error = cudaGetDevice(&previous_);
  if (error == cudaSuccess && previous_ != device.ordinal()) {
    error = cudaSetDevice(device.ordinal());
    switched_ = error == cudaSuccess;
  }
  if (error != cudaSuccess) status_ = device.Check(error, "cudaSetDevice");
}

CudaDevice::Scope::~Scope() {
  if (switched_) IgnoreCudaError(cudaSetDevice(previous_));
}

DeviceProps CudaDevice::props() const {
  DeviceProps props;
  props.name = name_;
  props.description =
      absl::StrCat(info_.gpu_name, " (sm_", info_.compute_major,
                   info_.compute_minor, ", PCI ", info_.pci_bus_id, ")");
  props.type = info_.integrated ? DeviceType::kIGpu : DeviceType::kGpu;
  props.memory_total = info_.total_memory;
  props.memory_free = info_.total_memory;
  if (initialized()) {
    // Only a context knows; asking never creates one.
    Scope scope(const_cast<CudaDevice&>(*this));
    size_t free_bytes = 0, total_bytes = 0;
    const cudaError_t error = cudaMemGetInfo(&free_bytes, &total_bytes);
    IgnoreCudaError(error);
    if (scope.status().ok() && error == cudaSuccess) {
      props.memory_free = free_bytes;
    }
  }
  props.caps.async = true;
  props.caps.host_buffer = true;
  props.caps.buffer_from_host_ptr = true;
  props.caps.events = true;
  return props;
}

absl::StatusOr<std::unique_ptr<Backend>> CudaDevice::CreateBackend(
    absl::string_view params) {
  bool tf32 = false;
  if (params == "tf32=1" || params == "tf32=0") {
    tf32 = params == "tf32=1";
  } else if (!params.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": unknown backend parameters '", params,
                     "' (the one option is tf32=0|1)"));
  }
  FERRY_RETURN_IF_ERROR(sticky_error());
  std::unique_ptr<CudaBackend> backend(new CudaBackend(*this));
  backend->allow_tf32_ = tf32;
  FERRY_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaDevice::BufferFromHostPointer(
    void* data, size_t size) {
  if (data == nullptr || size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": BufferFromHostPointer needs memory"));
  }
  FERRY_RETURN_IF_ERROR(sticky_error());
  Scope scope(*this);
  FERRY_RETURN_IF_ERROR(scope.status());
  CudaHostBuffer::Kind kind = CudaHostBuffer::Kind::kRegistered;
  bool read_only = false;
  cudaError_t error = cudaHostRegister(data, size, cudaHostRegisterPortable);
  if (error == cudaErrorNotPermitted || error == cudaErrorInvalidValue) {
    // Read-only pages (a read-only mmap of a weights file) can only be
    // pinned read-only: the GPU reads them, never writes.
    IgnoreCudaError(error);
    error = cudaHostRegister(
        data, size, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    read_only = error == cudaSuccess;
  }
  if (error == cudaErrorHostMemoryAlreadyRegistered) {
    // Pages pinned already (by a buffer over neighbouring memory in the same
    // pages): used as they are; that registration stays its owner's. If it
    // ends first, copies still work, through staging.
    IgnoreCudaError(error);
    kind = CudaHostBuffer::Kind::kBorrowed;
  } else {
    FERRY_RETURN_IF_ERROR(
        Check(error, absl::StrCat("cudaHostRegister(", size, " bytes)")));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> host =
      WrapHostMemory(&RegisteredHostType(), data, size);
  if (!host.ok()) {
    if (kind == CudaHostBuffer::Kind::kRegistered) {
      IgnoreCudaError(cudaHostUnregister(data));
    }
    return host.status();
  }
  return std::unique_ptr<Buffer>(new CudaHostBuffer(
      &pinned_type_, *this, *std::move(host), kind, read_only));
}

absl::Status CudaDevice::CheckOp(const Tensor& node) const {
  // Block-quantized weights as mul_mat's a (cuda_kernels::ReadsWeightsOf);
  // other nodes reading blocks go to the CPU.
  for (int i = 0; i < kMaxSrc; ++i) {
    const Tensor* t = node.src[i];
    if (t == nullptr || !IsQuantized(t->dtype)) continue;
    const bool read = node.op == Op::kMulMat && i == 0 &&
                      cuda_kernels::ReadsWeightsOf(t->dtype);
    if (!read) {
      return absl::UnimplementedError(absl::StrCat(
          name_, ": no CUDA kernel reads block dtype ", DTypeName(t->dtype),
          " ('", t->name, "', source ", i, " of ", OpName(node.op), " '",
          node.name, "'): blocks are read only as mul_mat's a"));
    }
  }
  if (IsQuantized(node.dtype)) {
    return absl::UnimplementedError(
        absl::StrCat(name_, ": no CUDA kernel writes block dtype ",
                     DTypeName(node.dtype), " ('", node.name, "')"));
  }
  // No CUDA kernel yet: the engine attends over a gathered, masked window
  // when a model's backend refuses range_attention
  // (llama::CanAttendByRanges).
  if (node.op == Op::kRangeAttention) {
    return absl::UnimplementedError(absl::StrCat(
        name_, ": no CUDA kernel for range_attention ('", node.name, "')"));
  }
  // The CPU ropes with frequency factors, the CUDA kernel does not (yet):
  // such a node goes to the CPU.
  if (node.op == Op::kRope && node.src[2] != nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(name_,
                     ": no CUDA kernel for rope with frequency "
                     "factors ('",
                     node.name, "')"));
  }
  return cpu_kernels::CheckSupported(node);
}

bool CudaDevice::SupportsBufferType(const BufferType* type) const {
  return type == &buffer_type_;
}

bool CudaDevice::OffloadOp(const Tensor& node) const {
  return BatchSize(node) >= kMinOffloadBatch && node.op != Op::kGetRows;
}

absl::Status CudaDevice::sticky_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sticky_;
}

EventWaitMode CudaDevice::WaitMode(const Event& event) const {
  if (event.IsComplete()) return EventWaitMode::kDevice;
  const CudaNativeEvent* native = CudaNativeEvent::Of(event);
  return native != nullptr && native->issued() ? EventWaitMode::kDevice
                                               : EventWaitMode::kHost;
}

absl::Status CudaDevice::Check(cudaError_t error, absl::string_view context) {
  if (error == cudaSuccess) return absl::OkStatus();
  // Consumed here: the thread's slot must not hand it to a later call.
  IgnoreCudaError(error);
  absl::Status status = CudaToStatus(error, absl::StrCat(name_, ": ", context));
  if (IsStickyCudaError(error)) {
    status = absl::InternalError(absl::StrCat(
        status.message(),
        "; the device's CUDA context is lost, restart the process to use it"));
    std::lock_guard<std::mutex> lock(mu_);
    if (sticky_.ok()) sticky_ = status;
    return sticky_;
  }
  return status;
}

absl::Status CudaDevice::CheckLaunch(absl::Status status) {
  if (status.ok()) return status;
  // A ruined context shows as the pending error of every call: launches
  // and cuBLAS return it (or EXECUTION_FAILED) without the device's Check.
  const cudaError_t pending = cudaGetLastError();
  if (IsStickyCudaError(pending)) {
    return Check(pending, absl::StrCat(status.message(), "; then"));
  }
  return status;
}

cuda_internal::CompletionPoller& CudaDevice::poller() {
  std::call_once(poller_once_, [this] {
    cuda_internal::CompletionPoller::Options options;
    const int ordinal = info_.ordinal;
    options.on_thread_start = [ordinal] {
      IgnoreCudaError(cudaSetDevice(ordinal));
    };
    poller_ = std::make_unique<cuda_internal::CompletionPoller>(
        absl::StrCat(name_, " poller"), std::move(options));
  });
  return *poller_;
}

absl::StatusOr<std::shared_ptr<PooledCudaEvent>> CudaDevice::AcquireEvent() {
  absl::StatusOr<std::shared_ptr<PooledCudaEvent>> event = events_->Acquire();
  if (!event.ok()) return CheckLaunch(event.status());
  return event;
}

namespace {

std::mutex& BackendsMutex() {
  static std::mutex* const mu = new std::mutex();
  return *mu;
}

std::vector<CudaBackend*>& Backends() {
  static std::vector<CudaBackend*>* const backends =
      new std::vector<CudaBackend*>();
  return *backends;
}

}  // namespace

void CudaDevice::AddBackend(CudaBackend* backend) {
  std::lock_guard<std::mutex> lock(BackendsMutex());
  Backends().push_back(backend);
}

void CudaDevice::RemoveBackend(CudaBackend* backend) {
  std::lock_guard<std::mutex> lock(BackendsMutex());
  auto& backends = Backends();
  backends.erase(std::remove(backends.begin(), backends.end(), backend),
                 backends.end());
}

CudaMemoryStats CudaDevice::memory_stats() const {
  const cuda_internal::CachingAllocatorStats stats = allocator_->stats();
  return CudaMemoryStats{.allocated_bytes = stats.allocated_bytes,
                         .cached_bytes = stats.cached_bytes,
                         .peak_bytes = stats.peak_bytes,
                         .hits = stats.hits,
                         .misses = stats.misses,
                         .releases = stats.releases,
                         .oom_retries = stats.oom_retries};
}

size_t CudaDevice::ReleaseCachedMemory() { return allocator_->ReleaseIdle(); }

cuda_internal::FenceList CudaDevice::FencesForFree() {
  cuda_internal::FenceList fences;
  // Every backend of every GPU: a peer's copy engines read this memory
  // from the peer's streams. (Lock order: this list, then a backend's
  // issue queue; nothing takes this list under an issue queue's lock.)
  std::lock_guard<std::mutex> lock(BackendsMutex());
  for (CudaBackend* backend : Backends()) {
    fences.push_back(backend->FenceForFree());
  }
  return fences;
}

void CudaDevice::EnablePeerAccessTo(int peer) {
  if (peer == info_.ordinal) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!peers_.insert(peer).second) return;
  }
  int can = 0;
  const cudaError_t error = cudaDeviceCanAccessPeer(&can, info_.ordinal, peer);
  IgnoreCudaError(error);
  if (error != cudaSuccess || can == 0) return;
  // Already enabled (by other code in the process) is as good.
  IgnoreCudaError(cudaDeviceEnablePeerAccess(peer, 0));
}

absl::Status CudaDevice::Transfer(
    absl::string_view what,
    absl::FunctionRef<cudaError_t(cudaStream_t)> enqueue) {
  FERRY_RETURN_IF_ERROR(sticky_error());
  Scope scope(*this);
  FERRY_RETURN_IF_ERROR(scope.status());
  cudaStream_t stream = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!transfer_streams_.empty()) {
      stream = transfer_streams_.back();
      transfer_streams_.pop_back();
    }
  }
  if (stream == nullptr) {
    FERRY_RETURN_IF_ERROR(
        Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags"));
  }
  absl::Status status = Check(enqueue(stream), what);
  absl::Status synced =
      Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  {
    std::lock_guard<std::mutex> lock(mu_);
    transfer_streams_.push_back(stream);
  }
  FERRY_RETURN_IF_ERROR(status);
  return synced;
}

absl::StatusOr<int> RegisterCudaDevices(Registry& registry) {
  FERRY_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  int registered = 0;
  for (int i = 0; i < count; ++i) {
    if (registry.FindDevice(absl::StrCat("cuda", i)).ok()) continue;
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(i);
    if (!device.ok()) {
      std::fprintf(stderr, "ferry: skipping CUDA device %d: %s\n", i,
                   std::string(device.status().message()).c_str());
      continue;
    }
    FERRY_RETURN_IF_ERROR(registry.RegisterDevice(*std::move(device)));
    ++registered;
  }
  return registered;
}

absl::Status RegisterCudaFamily(Registry& registry) {
  if (registry.HasFamily("cuda")) return absl::OkStatus();
  return registry.RegisterFamily(
      "cuda",
      [](int index,
         absl::string_view options) -> absl::StatusOr<std::unique_ptr<Device>> {
        if (!options.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "cuda devices take no options (got '", options, "')"));
        }
        FERRY_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
        if (index >= count) {
          return absl::NotFoundError(absl::StrCat(
              "no CUDA device ", index, ": this machine has ", count));
        }
        FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device,
                               CudaDevice::Create(index));
        return std::unique_ptr<Device>(std::move(device));
      });
}

}  // namespace ferry
