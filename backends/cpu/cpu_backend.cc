#include "ferry/backends/cpu/cpu_backend.h"

#include <unistd.h>

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ferry/backends/cpu/kernels/kernel_runner.h"
#include "ferry/backends/cpu/kernels/kernels.h"
#include "ferry/backends/registry.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/trace.h"

namespace ferry {
namespace {

// Matches the widest vector loads the kernels use (AVX-512).
constexpr size_t kCpuAlignment = 64;

// True for host memory the CPU reads in place, whether row-major (host
// buffers) or packed (its weights buffers).
bool IsCpuMemory(const Buffer* buffer) {
  return buffer != nullptr &&
         (buffer->is_host() ||
          dynamic_cast<const CpuPackedBuffer*>(buffer) != nullptr);
}

absl::Status CheckHostTensor(const Tensor& tensor, size_t offset, size_t size,
                             absl::string_view what) {
  const size_t bytes = static_cast<size_t>(tensor.NumBytes());
  if (!IsCpuMemory(tensor.buffer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu: ", what, " of tensor '", tensor.name,
                     "', which is not in host memory"));
  }
  if (offset > bytes || size > bytes - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("cpu: ", what, " of bytes [", offset, ", ", offset + size,
                     ") of tensor '", tensor.name, "' of ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

CpuDevice::CpuDevice() : buffer_type_("cpu", kCpuAlignment, this) {}

DeviceProps CpuDevice::props() const {
  DeviceProps props;
  props.name = "cpu";
  props.description = absl::StrCat(
      "host CPU, ", std::thread::hardware_concurrency(), " hardware threads");
  props.type = DeviceType::kCpu;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long available = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  props.memory_total = static_cast<size_t>(pages) * page_size;
  props.memory_free = static_cast<size_t>(available) * page_size;
  props.caps.async = true;
  props.caps.host_buffer = false;
  props.caps.buffer_from_host_ptr = true;
  props.caps.events = true;
  return props;
}

absl::StatusOr<std::unique_ptr<Backend>> CpuDevice::CreateBackend(
    absl::string_view params) {
  CpuBackendOptions options;
  for (absl::string_view param :
       absl::StrSplit(params, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(param, absl::MaxSplits('=', 1));
    if (kv.first == "threads" &&
        absl::SimpleAtoi(kv.second, &options.threads) && options.threads >= 1 &&
        options.threads <= 1024) {
      continue;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("cpu: bad backend parameter '", param,
                     "' (expected threads=N with 1 <= N <= 1024)"));
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> backend,
                         CpuBackend::Create(*this, options));
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<Buffer>> CpuDevice::BufferFromHostPointer(
    void* data, size_t size) {
  return WrapHostMemory(&buffer_type_, data, size);
}

bool CpuDevice::SupportsOp(const Tensor& node) const {
  return cpu_kernels::CheckSupported(node).ok();
}

bool CpuDevice::SupportsBufferType(const BufferType* type) const {
  return type != nullptr &&
         (type->is_host() ||
          dynamic_cast<const CpuPackedBufferType*>(type) != nullptr);
}

CpuDevice& GetCpuDevice() {
  static CpuDevice* const device = [] {
    auto owned = std::make_unique<CpuDevice>();
    CpuDevice* raw = owned.get();
    if (!Registry::Global().RegisterDevice(std::move(owned)).ok()) {
      // User code registered its own "cpu" first (the registry refused and
      // dropped ours): keep an unregistered one for the process instead of
      // aborting.
      raw = new CpuDevice();
    }
    return raw;
  }();
  return *device;
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(
    CpuDevice& device, CpuBackendOptions options) {
  int threads = options.threads;
  if (threads <= 0) {
    threads = std::max(1u, std::thread::hardware_concurrency());
  }
  return std::unique_ptr<CpuBackend>(new CpuBackend(device, threads));
}

CpuBackend::CpuBackend(CpuDevice& device, int threads)
    : device_(device),
      threads_(threads),
      runner_(std::make_unique<cpu_kernels::KernelRunner>(threads)),
      compute_track_(TraceRecorder::Global().Track("cpu/compute")),
      copy_track_(TraceRecorder::Global().Track("cpu/copy")),
      stream_("cpu") {}

CpuBackend::~CpuBackend() = default;

void CpuBackend::SetAbortCallback(std::function<bool()> callback) {
  std::lock_guard<std::mutex> lock(abort_mu_);
  abort_ = callback
               ? std::make_shared<std::function<bool()>>(std::move(callback))
               : nullptr;
}

absl::Status CpuBackend::SetTensorAsync(Tensor& tensor, const void* data,
                                        size_t offset, size_t size) {
  FERRY_RETURN_IF_ERROR(CheckHostTensor(tensor, offset, size, "write"));
  if (!tensor.buffer->is_host()) {
    // Packed weights: the buffer packs the logical bytes as it copies.
    Tensor* t = &tensor;
    stream_.Enqueue([t, data, offset, size, track = copy_track_] {
      ScopedTraceSpan span(track, "set");
      return t->buffer->SetTensor(*t, data, offset, size);
    });
    return absl::OkStatus();
  }
  char* dst = static_cast<char*>(tensor.data) + offset;
  stream_.Enqueue([dst, data, size, track = copy_track_] {
    ScopedTraceSpan span(track, "set");
    std::memcpy(dst, data, size);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::GetTensorAsync(const Tensor& tensor, void* data,
                                        size_t offset, size_t size) {
  FERRY_RETURN_IF_ERROR(CheckHostTensor(tensor, offset, size, "read"));
  if (!tensor.buffer->is_host()) {
    const Tensor* t = &tensor;
    stream_.Enqueue([t, data, offset, size, track = copy_track_] {
      ScopedTraceSpan span(track, "get");
      return t->buffer->GetTensor(*t, data, offset, size);
    });
    return absl::OkStatus();
  }
  const char* src = static_cast<const char*>(tensor.data) + offset;
  stream_.Enqueue([src, data, size, track = copy_track_] {
    ScopedTraceSpan span(track, "get");
    std::memcpy(data, src, size);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::EnqueueCompute(NodeSpan nodes) {
  for (const Tensor* node : nodes) {
    FERRY_RETURN_IF_ERROR(cpu_kernels::CheckSupported(*node));
    if (node->data == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cpu: node '", node->name, "' (", OpName(node->op),
                       ") has no memory; allocate the graph first"));
    }
  }
  std::shared_ptr<std::function<bool()>> abort;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    abort = abort_;
  }
  cpu_kernels::KernelRunner* runner = runner_.get();
  const int track = compute_track_;
  stream_.Enqueue([runner, nodes, abort = std::move(abort), track] {
    ScopedTraceSpan span(track, "compute");
    // EnqueueCompute checked every node already.
    return runner->Run(nodes, abort ? *abort : std::function<bool()>(),
                       /*validate=*/false);
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::Wait(const Event& event) {
  stream_.EnqueueWait(event);
  return absl::OkStatus();
}

// Registers the CPU device with the global registry at static-init time.
[[maybe_unused]] static CpuDevice& registered_cpu_device = GetCpuDevice();

}  // namespace ferry
