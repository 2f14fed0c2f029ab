#include "ferry/backends/cpu/cpu_backend.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ferry/backends/host/kernels/kernel_runner.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/backends/node_snapshot.h"
#include "ferry/backends/registry.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/op.h"
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

// Where a tensor's data is for the kernels: its host address, once checked
// to be placed in host memory and inside its buffer.
absl::StatusOr<void*> LocateHostTensor(const Tensor& t) {
  if (t.data == nullptr) {
    return absl::FailedPreconditionError(
        "has no memory (allocate the graph first)");
  }
  if (t.buffer == nullptr) return t.data;  // Host memory its owner placed.
  // Packed weights are the CPU's own memory in the GEMM's layout (the
  // kernels check the layout fits the op); they take their packed size.
  const auto* packed =
      dynamic_cast<const CpuPackedBufferType*>(t.buffer->type());
  if (!t.buffer->is_host() && packed == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("lives in ", t.buffer->type()->name(),
                     " memory, which the CPU cannot read"));
  }
  const auto* base = static_cast<const char*>(t.buffer->base());
  const auto* data = static_cast<const char*>(t.data);
  const size_t bytes = packed != nullptr ? packed->AllocSize(t)
                                         : static_cast<size_t>(t.NumBytes());
  if (data < base || static_cast<size_t>(data - base) > t.buffer->size() ||
      bytes > t.buffer->size() - static_cast<size_t>(data - base)) {
    return absl::OutOfRangeError(
        absl::StrCat("its ", bytes, " bytes are not inside its buffer of ",
                     t.buffer->size(), " bytes"));
  }
  return t.data;
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

absl::Status CpuDevice::CheckOp(const Tensor& node) const {
  return cpu_kernels::CheckSupported(node);
}

std::vector<DeviceCounters> CpuDevice::engine_stats() const {
  DeviceCounters compute;
  compute.name = "cpu/compute";
  compute.busy_ns = compute_ns_.load(std::memory_order_relaxed);
  compute.ops = compute_ops_.load(std::memory_order_relaxed);
  return {compute};
}

bool CpuDevice::SupportsBufferType(const BufferType* type) const {
  return type != nullptr &&
         (type->is_host() ||
          dynamic_cast<const CpuPackedBufferType*>(type) != nullptr);
}

CpuDevice& GetCpuDevice() {
  // Made on first use, never destroyed (backends may outlive main's locals).
  static CpuDevice* const device = new CpuDevice();
  return *device;
}

absl::Status RegisterCpuDevice(Registry& registry) {
  CpuDevice& cpu = GetCpuDevice();
  absl::StatusOr<Device*> existing = registry.FindDevice(cpu.name());
  if (existing.ok()) {
    if (*existing == &cpu) return absl::OkStatus();
    return absl::AlreadyExistsError(
        "another device named 'cpu' is registered already");
  }
  return registry.RegisterDevice(cpu);
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
      stream_("cpu", &device, StreamMode::kCallerRuns) {}

CpuBackend::~CpuBackend() = default;

void CpuBackend::SetAbortCallback(std::function<bool()> callback) {
  std::lock_guard<std::mutex> lock(abort_mu_);
  abort_ = callback
               ? std::make_shared<std::function<bool()>>(std::move(callback))
               : nullptr;
}

absl::Status CpuBackend::EnqueueSetTensor(Tensor& tensor, const void* data,
                                          size_t offset, size_t size) {
  FERRY_RETURN_IF_ERROR(CheckHostTensor(tensor, offset, size, "write"));
  if (!tensor.buffer->is_host()) {
    // Packed weights: the buffer packs the logical bytes as it copies.
    Tensor* t = &tensor;
    stream_.EnqueueDeferred([t, data, offset, size, track = copy_track_] {
      ScopedTraceSpan span(track, "set");
      return t->buffer->SetTensor(*t, data, offset, size);
    });
    return absl::OkStatus();
  }
  char* dst = static_cast<char*>(tensor.data) + offset;
  stream_.EnqueueDeferred([dst, data, size, track = copy_track_] {
    ScopedTraceSpan span(track, "set");
    // memmove: `data` may lie in this device's memory (a remote worker's
    // copy between two tensors of one buffer), overlapping dst.
    std::memmove(dst, data, size);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::EnqueueGetTensor(const Tensor& tensor, void* data,
                                          size_t offset, size_t size) {
  FERRY_RETURN_IF_ERROR(CheckHostTensor(tensor, offset, size, "read"));
  if (!tensor.buffer->is_host()) {
    const Tensor* t = &tensor;
    stream_.EnqueueDeferred([t, data, offset, size, track = copy_track_] {
      ScopedTraceSpan span(track, "get");
      return t->buffer->GetTensor(*t, data, offset, size);
    });
    return absl::OkStatus();
  }
  const char* src = static_cast<const char*>(tensor.data) + offset;
  stream_.EnqueueDeferred([src, data, size, track = copy_track_] {
    ScopedTraceSpan span(track, "get");
    std::memmove(data, src, size);  // As in EnqueueSetTensor.
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::EnqueueCompute(NodeSpan nodes) {
  for (const Tensor* node : nodes) {
    if (node != nullptr)
      FERRY_RETURN_IF_ERROR(cpu_kernels::CheckSupported(*node));
  }
  FERRY_ASSIGN_OR_RETURN(NodeSnapshot snapshot,
                         NodeSnapshot::Make(nodes, LocateHostTensor));
  std::shared_ptr<std::function<bool()>> abort;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    abort = abort_;
  }
  // With tracing on, one span per node named as every backend names it
  // (the snapshot keeps no names, so they are taken now).
  std::vector<std::string> span_names;
  if (TraceRecorder::Global().enabled()) {
    for (const Tensor* node : nodes) {
      if (node != nullptr && IsComputeOp(node->op))
        span_names.push_back(NodeSpanName(*node));
    }
    if (span_names.size() != snapshot.size()) span_names.clear();
  }
  cpu_kernels::KernelRunner* runner = runner_.get();
  const int track = compute_track_;
  CpuDevice* device = &device_;
  stream_.EnqueueDeferred([runner, device, snapshot = std::move(snapshot),
                           abort = std::move(abort), track,
                           span_names = std::move(span_names)]() mutable {
    const auto start = std::chrono::steady_clock::now();
    const std::function<bool()> no_abort;
    const std::function<bool()>& should_abort = abort ? *abort : no_abort;
    // EnqueueCompute checked every node already.
    absl::Status status;
    if (!span_names.empty()) {
      for (size_t i = 0; i < span_names.size() && status.ok(); ++i) {
        ScopedTraceSpan span(track, span_names[i]);
        status = runner->Run(snapshot.nodes().subspan(i, 1), should_abort,
                             /*validate=*/false);
      }
    } else {
      status = runner->Run(snapshot.nodes(), should_abort, /*validate=*/false);
    }
    device->compute_ns_.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now() - start)
            .count(),
        std::memory_order_relaxed);
    device->compute_ops_.fetch_add(1, std::memory_order_relaxed);
    return status;
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::EnqueueWait(const Event& event) {
  stream_.EnqueueWait(event);
  return absl::OkStatus();
}

}  // namespace ferry
