#include "ferry/backends/cuda/cuda_device.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/backends/cpu/kernels/kernels.h"
#include "ferry/backends/cuda/cuda_backend.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/cuda/cuda_status.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

// Batches at least this large are worth moving a weight to the GPU for
// (ggml's min_batch_size).
constexpr int64_t kMinOffloadBatch = 32;

// Device memory from the caching pool; freeing records fences on every
// stream of the device so the pool reuses it only after their work.
class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(CudaBufferType* type, CudaDevice& device,
             cuda_internal::CachingAllocator::Block block, size_t size)
      : Buffer(type, block.ptr, size), device_(device), block_(block) {}
  ~CudaBuffer() override {
    device_.allocator().Free(block_, cuda_internal::kNoStream, nullptr,
                             device_.RecordFencesOnAllStreams());
  }

  absl::Status SetTensor(Tensor& tensor, const void* data, size_t offset,
                         size_t size) override {
    FERRY_RETURN_IF_ERROR(device_.MakeCurrent());
    return device_.Check(cudaMemcpy(static_cast<char*>(tensor.data) + offset,
                                    data, size, cudaMemcpyHostToDevice),
                         absl::StrCat("cudaMemcpy(h2d, ", size, " bytes)"));
  }
  absl::Status GetTensor(const Tensor& tensor, void* data, size_t offset,
                         size_t size) override {
    FERRY_RETURN_IF_ERROR(device_.MakeCurrent());
    return device_.Check(
        cudaMemcpy(data, static_cast<const char*>(tensor.data) + offset, size,
                   cudaMemcpyDeviceToHost),
        absl::StrCat("cudaMemcpy(d2h, ", size, " bytes)"));
  }
  absl::Status MemsetTensor(Tensor& tensor, uint8_t value, size_t offset,
                            size_t size) override {
    FERRY_RETURN_IF_ERROR(device_.MakeCurrent());
    FERRY_RETURN_IF_ERROR(device_.Check(
        cudaMemset(static_cast<char*>(tensor.data) + offset, value, size),
        "cudaMemset"));
    return device_.Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  // Any source: host memory, this GPU or a peer (unified addressing).
  absl::Status CopyTensorFrom(const Tensor& src, Tensor& dst) override {
    FERRY_RETURN_IF_ERROR(device_.MakeCurrent());
    const size_t bytes = static_cast<size_t>(src.NumBytes());
    if (!src.buffer->is_host() &&
        dynamic_cast<CudaDevice*>(src.buffer->type()->device()) == nullptr) {
      return absl::UnimplementedError(absl::StrCat("no direct copy from ",
                                                   src.buffer->type()->name(),
                                                   " to ", type()->name()));
    }
    return device_.Check(
        cudaMemcpy(dst.data, src.data, bytes, cudaMemcpyDefault),
        absl::StrCat("cudaMemcpy(", bytes, " bytes into ", type()->name(),
                     ")"));
  }
  absl::Status Clear(uint8_t value) override {
    FERRY_RETURN_IF_ERROR(device_.MakeCurrent());
    FERRY_RETURN_IF_ERROR(
        device_.Check(cudaMemset(base(), value, size()), "cudaMemset"));
    return device_.Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

 private:
  CudaDevice& device_;
  cuda_internal::CachingAllocator::Block block_;
};

// Pinned or registered host memory: host code reads it directly (through
// the plain host buffer it wraps); the GPU copies it by DMA.
class CudaHostBuffer final : public Buffer {
 public:
  enum class Kind { kAllocated, kRegistered };

  CudaHostBuffer(BufferType* type, std::unique_ptr<Buffer> host, Kind kind)
      : Buffer(type, host->base(), host->size()),
        host_(std::move(host)),
        kind_(kind) {}
  ~CudaHostBuffer() override {
    void* memory = base();
    host_.reset();
    if (kind_ == Kind::kAllocated) {
      (void)cudaFreeHost(memory);
    } else {
      (void)cudaHostUnregister(memory);
    }
  }

  absl::Status SetTensor(Tensor& tensor, const void* data, size_t offset,
                         size_t size) override {
    return host_->SetTensor(tensor, data, offset, size);
  }
  absl::Status GetTensor(const Tensor& tensor, void* data, size_t offset,
                         size_t size) override {
    return host_->GetTensor(tensor, data, offset, size);
  }
  absl::Status MemsetTensor(Tensor& tensor, uint8_t value, size_t offset,
                            size_t size) override {
    return host_->MemsetTensor(tensor, value, offset, size);
  }
  absl::Status CopyTensorFrom(const Tensor& src, Tensor& dst) override {
    return host_->CopyTensorFrom(src, dst);
  }
  absl::Status Clear(uint8_t value) override { return host_->Clear(value); }

 private:
  std::unique_ptr<Buffer> host_;
  Kind kind_;
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
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
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
  FERRY_RETURN_IF_ERROR(device_.MakeCurrent());
  void* memory = nullptr;
  FERRY_RETURN_IF_ERROR(device_.Check(
      cudaHostAlloc(&memory, std::max<size_t>(size, 1), cudaHostAllocPortable),
      absl::StrCat("cudaHostAlloc(", size, " bytes)")));
  absl::StatusOr<std::unique_ptr<Buffer>> host =
      WrapHostMemory(&RegisteredHostType(), memory, std::max<size_t>(size, 1));
  if (!host.ok()) {
    (void)cudaFreeHost(memory);
    return host.status();
  }
  return std::unique_ptr<Buffer>(new CudaHostBuffer(
      this, *std::move(host), CudaHostBuffer::Kind::kAllocated));
}

// --- Raw memory for the pool. ---

absl::StatusOr<void*> CudaDevice::RawMemory::Allocate(size_t size) {
  FERRY_RETURN_IF_ERROR(device_.MakeCurrent());
  void* ptr = nullptr;
  const cudaError_t error = cudaMalloc(&ptr, size);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // Out of memory is not sticky; clear it.
    return device_.Check(error, absl::StrCat("cudaMalloc(", size, " bytes)"));
  }
  return ptr;
}

void CudaDevice::RawMemory::Free(void* ptr) {
  if (device_.MakeCurrent().ok()) (void)cudaFree(ptr);
}

// --- Device. ---

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int ordinal) {
  FERRY_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (ordinal < 0 || ordinal >= count) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA device ", ordinal, " (", count, " present)"));
  }
  cudaDeviceProp prop;
  FERRY_RETURN_IF_ERROR(CudaToStatus(cudaGetDeviceProperties(&prop, ordinal),
                                     "cudaGetDeviceProperties"));
  CudaDeviceInfo info;
  info.ordinal = ordinal;
  info.gpu_name = prop.name;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), ordinal) == cudaSuccess) {
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
      raw_memory_(*this),
      allocator_(&raw_memory_) {
  cuda_internal::CompletionPoller::Options options;
  const int ordinal = info_.ordinal;
  options.on_thread_start = [ordinal] { (void)cudaSetDevice(ordinal); };
  poller_ = std::make_unique<cuda_internal::CompletionPoller>(
      absl::StrCat(name_, " poller"), std::move(options));
}

CudaDevice::~CudaDevice() {
  poller_.reset();  // Delivers what is pending.
  (void)MakeCurrent();
  std::lock_guard<std::mutex> lock(mu_);
  for (cudaEvent_t event : free_events_) (void)cudaEventDestroy(event);
}

DeviceProps CudaDevice::props() const {
  DeviceProps props;
  props.name = name_;
  props.description =
      absl::StrCat(info_.gpu_name, " (sm_", info_.compute_major,
                   info_.compute_minor, ", PCI ", info_.pci_bus_id, ")");
  props.type = info_.integrated ? DeviceType::kIGpu : DeviceType::kGpu;
  props.memory_total = info_.total_memory;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(info_.ordinal) == cudaSuccess &&
      cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    props.memory_free = free_bytes;
  }
  props.caps.async = true;
  props.caps.host_buffer = true;
  props.caps.buffer_from_host_ptr = true;
  props.caps.events = true;
  return props;
}

absl::StatusOr<std::unique_ptr<Backend>> CudaDevice::CreateBackend(
    absl::string_view params) {
  if (!params.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": unknown backend parameters '", params, "' (none exist)"));
  }
  FERRY_RETURN_IF_ERROR(sticky_error());
  std::unique_ptr<CudaBackend> backend(new CudaBackend(*this));
  FERRY_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaDevice::BufferFromHostPointer(
    void* data, size_t size) {
  if (data == nullptr || size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": BufferFromHostPointer needs memory"));
  }
  FERRY_RETURN_IF_ERROR(MakeCurrent());
  FERRY_RETURN_IF_ERROR(
      Check(cudaHostRegister(data, size, cudaHostRegisterPortable),
            absl::StrCat("cudaHostRegister(", size, " bytes)")));
  absl::StatusOr<std::unique_ptr<Buffer>> host =
      WrapHostMemory(&RegisteredHostType(), data, size);
  if (!host.ok()) {
    (void)cudaHostUnregister(data);
    return host.status();
  }
  return std::unique_ptr<Buffer>(new CudaHostBuffer(
      &pinned_type_, *std::move(host), CudaHostBuffer::Kind::kRegistered));
}

bool CudaDevice::SupportsOp(const Tensor& node) const {
  // set_rows has no CUDA kernel yet.
  if (node.op == Op::kSetRows) return false;
  return cpu_kernels::CheckSupported(node).ok();
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

absl::Status CudaDevice::Check(cudaError_t error, absl::string_view context) {
  if (error == cudaSuccess) return absl::OkStatus();
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

absl::Status CudaDevice::MakeCurrent() {
  return Check(cudaSetDevice(info_.ordinal), "cudaSetDevice");
}

absl::StatusOr<cudaEvent_t> CudaDevice::AcquireEvent() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_events_.empty()) {
      cudaEvent_t event = free_events_.back();
      free_events_.pop_back();
      return event;
    }
  }
  FERRY_RETURN_IF_ERROR(MakeCurrent());
  cudaEvent_t event = nullptr;
  FERRY_RETURN_IF_ERROR(
      Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
            "cudaEventCreateWithFlags"));
  return event;
}

void CudaDevice::ReleaseEvent(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mu_);
  free_events_.push_back(event);
}

void CudaDevice::AddBackend(CudaBackend* backend) {
  std::lock_guard<std::mutex> lock(mu_);
  backends_.push_back(backend);
}

void CudaDevice::RemoveBackend(CudaBackend* backend) {
  std::lock_guard<std::mutex> lock(mu_);
  backends_.erase(std::remove(backends_.begin(), backends_.end(), backend),
                  backends_.end());
}

namespace {

// A raw event as a fence; destroyed with the fence.
class StreamFence : public cuda_internal::Fence {
 public:
  StreamFence(CudaDevice& device, cudaEvent_t event)
      : device_(device), event_(event) {}
  ~StreamFence() override { device_.ReleaseEvent(event_); }
  bool IsComplete() override {
    return cudaEventQuery(event_) != cudaErrorNotReady;
  }

 private:
  CudaDevice& device_;
  cudaEvent_t event_;
};

}  // namespace

cuda_internal::FenceList CudaDevice::RecordFencesOnAllStreams() {
  cuda_internal::FenceList fences;
  size_t wanted = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wanted = backends_.size() * CudaBackend::kNumStreams;
  }
  std::vector<cudaEvent_t> events;
  for (size_t i = 0; i < wanted; ++i) {
    absl::StatusOr<cudaEvent_t> event = AcquireEvent();
    if (!event.ok()) break;
    events.push_back(*event);
  }
  if (!MakeCurrent().ok()) {
    for (cudaEvent_t event : events) ReleaseEvent(event);
    return fences;
  }
  size_t used = 0;
  {
    // Under the lock, so no backend destroys its streams meanwhile.
    std::lock_guard<std::mutex> lock(mu_);
    for (CudaBackend* backend : backends_) {
      for (cudaStream_t s : backend->streams_) {
        if (used == events.size()) break;
        if (cudaEventRecord(events[used], s) != cudaSuccess) continue;
        fences.push_back(std::make_shared<StreamFence>(*this, events[used]));
        ++used;
      }
    }
  }
  for (size_t i = used; i < events.size(); ++i) ReleaseEvent(events[i]);
  return fences;
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
  // Peer access lets copies between GPUs go over NVLink/PCIe directly.
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < count; ++j) {
      int can = 0;
      if (i == j || cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess ||
          !can) {
        continue;
      }
      if (cudaSetDevice(i) == cudaSuccess) {
        const cudaError_t error = cudaDeviceEnablePeerAccess(j, 0);
        if (error == cudaErrorPeerAccessAlreadyEnabled)
          (void)cudaGetLastError();
      }
    }
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
