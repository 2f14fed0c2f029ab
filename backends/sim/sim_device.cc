#include "ferry/backends/sim/sim_device.h"

#include <sys/mman.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/sim/internal/sim_backend.h"
#include "ferry/backends/sim/internal/sim_engine.h"
#include "ferry/backends/sim/internal/sim_memory.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

using sim_internal::SimEngine;
using sim_internal::SimWork;

// A buffer of device memory. Its synchronous transfers run on the device's
// engines (so they are modelled, traced and ordered with the engines' other
// work) and return when done. Thread-compatible.
class SimBuffer final : public Buffer {
 public:
  SimBuffer(SimBufferType* type, SimDevice* device, char* base, size_t size)
      : Buffer(type, base, size), device_(device) {}
  ~SimBuffer() override {
    device_->FreeDevice(static_cast<char*>(base()), size());
  }

  absl::Status SetTensor(Tensor& tensor, const void* data, size_t offset,
                         size_t size) override {
    FERRY_ASSIGN_OR_RETURN(char* dst,
                           device_->TensorAlias(tensor, offset, size, "write"));
    const bool pinned =
        sim_internal::PinnedRanges::Global().Contains(data, size);
    const int64_t ns =
        device_->CopyNanos(size, pinned ? device_->config_.h2d_bw
                                        : device_->config_.pageable_h2d_bw());
    if (device_->TakeCopyFault()) return InjectedCopyFault(tensor, "h2d");
    std::string name = absl::StrCat("set ", tensor.name);
    return device_->RunSync(
        SimEngineKind::kH2D, [dst, data, size, ns, name = std::move(name)](
                                 std::vector<SimWork>& work) mutable {
          std::memmove(dst, data, size);
          work.push_back(
              SimWork{std::move(name), ns, static_cast<int64_t>(size), 0});
          return absl::OkStatus();
        });
  }

  absl::Status GetTensor(const Tensor& tensor, void* data, size_t offset,
                         size_t size) override {
    FERRY_ASSIGN_OR_RETURN(char* src,
                           device_->TensorAlias(tensor, offset, size, "read"));
    const bool pinned =
        sim_internal::PinnedRanges::Global().Contains(data, size);
    const int64_t ns =
        device_->CopyNanos(size, pinned ? device_->config_.d2h_bw
                                        : device_->config_.pageable_d2h_bw());
    if (device_->TakeCopyFault()) return InjectedCopyFault(tensor, "d2h");
    std::string name = absl::StrCat("get ", tensor.name);
    return device_->RunSync(
        SimEngineKind::kD2H, [src, data, size, ns, name = std::move(name)](
                                 std::vector<SimWork>& work) mutable {
          std::memcpy(data, src, size);
          work.push_back(
              SimWork{std::move(name), ns, static_cast<int64_t>(size), 0});
          return absl::OkStatus();
        });
  }

  absl::Status MemsetTensor(Tensor& tensor, uint8_t value, size_t offset,
                            size_t size) override {
    FERRY_ASSIGN_OR_RETURN(
        char* dst, device_->TensorAlias(tensor, offset, size, "memset"));
    return Memset(dst, value, size, absl::StrCat("memset ", tensor.name));
  }

  absl::Status CopyTensorFrom(const Tensor& src, Tensor& dst) override {
    const auto* src_type =
        src.buffer == nullptr
            ? nullptr
            : dynamic_cast<const SimBufferType*>(src.buffer->type());
    if (src_type == nullptr) return Buffer::CopyTensorFrom(src, dst);
    SimDevice& src_device = src_type->sim_device();
    const size_t bytes = static_cast<size_t>(src.NumBytes());
    FERRY_ASSIGN_OR_RETURN(char* from,
                           src_device.TensorAlias(src, 0, bytes, "copy"));
    FERRY_ASSIGN_OR_RETURN(char* to,
                           device_->TensorAlias(dst, 0, bytes, "copy"));
    const int64_t ns =
        &src_device == device_
            ? device_->CopyNanos(2 * bytes, device_->config_.mem_bw, false)
            : device_->CopyNanos(bytes, std::min(device_->config_.d2d_bw,
                                                 src_device.config_.d2d_bw));
    if (device_->TakeCopyFault()) return InjectedCopyFault(dst, "d2d");
    std::string name = absl::StrCat("copy ", src.name, " -> ", dst.name);
    return device_->RunSync(
        SimEngineKind::kD2D, [from, to, bytes, ns, name = std::move(name)](
                                 std::vector<SimWork>& work) mutable {
          std::memmove(to, from, bytes);
          work.push_back(
              SimWork{std::move(name), ns, static_cast<int64_t>(bytes), 0});
          return absl::OkStatus();
        });
  }

  absl::Status Clear(uint8_t value) override {
    char* alias = device_->Translate(base(), size());
    FERRY_CHECK(alias != nullptr);  // Mapped as long as the buffer lives.
    return Memset(alias, value, size(), "clear");
  }

 private:
  absl::Status Memset(char* dst, uint8_t value, size_t size, std::string name) {
    // A memset kernel writes every byte once.
    const int64_t ns = device_->KernelNanos(0, static_cast<int64_t>(size));
    return device_->RunSync(
        SimEngineKind::kCompute, [dst, value, size, ns, name = std::move(name)](
                                     std::vector<SimWork>& work) mutable {
          std::memset(dst, value, size);
          work.push_back(
              SimWork{std::move(name), ns, static_cast<int64_t>(size), 0});
          return absl::OkStatus();
        });
  }

  absl::Status InjectedCopyFault(const Tensor& tensor, absl::string_view kind) {
    return absl::InternalError(absl::StrCat(device_->name(), "/", kind,
                                            ": injected fault: copy of '",
                                            tensor.name, "'"));
  }

  SimDevice* device_;
};

namespace {

// Pinned host memory: page-aligned, registered as pinned while it lives;
// or the caller's memory registered in place (mapped == 0: not owned), as
// cudaHostRegister does. Thread-compatible.
class SimPinnedBuffer final : public HostBuffer {
 public:
  SimPinnedBuffer(BufferType* type, void* base, size_t size, size_t mapped)
      : HostBuffer(type, base, size, /*owned=*/false), mapped_(mapped) {
    sim_internal::PinnedRanges::Global().Add(base, size);
  }
  ~SimPinnedBuffer() override {
    sim_internal::PinnedRanges::Global().Remove(base());
    if (mapped_ > 0) munmap(base(), mapped_);
  }

 private:
  size_t mapped_;
};

std::string FormatBytes(double bytes) {
  if (bytes >= 0x1p30) return absl::StrFormat("%.4g GiB", bytes / 0x1p30);
  if (bytes >= 0x1p20) return absl::StrFormat("%.4g MiB", bytes / 0x1p20);
  return absl::StrFormat("%.4g KiB", bytes / 0x1p10);
}

}  // namespace

absl::string_view SimBufferType::name() const { return device_->name(); }

size_t SimBufferType::max_size() const {
  return static_cast<size_t>(device_->config().max_alloc());
}

Device* SimBufferType::device() const { return device_; }

absl::StatusOr<std::unique_ptr<Buffer>> SimBufferType::Allocate(size_t size) {
  return device_->AllocateDevice(size);
}

Device* SimPinnedBufferType::device() const { return device_; }

absl::StatusOr<std::unique_ptr<Buffer>> SimPinnedBufferType::Allocate(
    size_t size) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = std::max(page, (size + page - 1) / page * page);
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": cannot allocate ", size,
                     " bytes of pinned memory: ", std::strerror(errno)));
  }
  return std::unique_ptr<Buffer>(new SimPinnedBuffer(this, base, size, mapped));
}

void SimDevice::FreeDeleter::operator()(void* p) const { std::free(p); }

absl::StatusOr<std::unique_ptr<SimDevice>> SimDevice::Create(
    std::string name, const SimConfig& config) {
  if (name.empty()) {
    return absl::InvalidArgumentError("a sim device needs a name");
  }
  return std::unique_ptr<SimDevice>(new SimDevice(std::move(name), config));
}

absl::StatusOr<std::unique_ptr<SimDevice>> SimDevice::Create(
    std::string name, absl::string_view config) {
  FERRY_ASSIGN_OR_RETURN(SimConfig parsed, ParseSimConfig(config));
  return Create(std::move(name), parsed);
}

SimDevice::SimDevice(std::string name, const SimConfig& config)
    : name_(std::move(name)),
      config_(config),
      memory_(std::make_unique<sim_internal::SimMemory>(config.guarded())),
      buffer_type_(this),
      pinned_type_(this, absl::StrCat(name_, "_host")) {
  for (int i = 0; i < kNumSimEngines; ++i) {
    engines_[static_cast<size_t>(i)] = std::make_unique<SimEngine>(
        absl::StrCat(name_, "/", SimEngineKindName(SimEngineKind(i))),
        config_.time_scale);
  }
  wait_engine_ = std::make_unique<SimEngine>(absl::StrCat(name_, "/wait"),
                                             config_.time_scale,
                                             /*in_order=*/false);
  SetFaults(config_.faults);
}

SimDevice::~SimDevice() {
  wait_engine_.reset();
  for (auto& engine : engines_) engine.reset();
}

DeviceProps SimDevice::props() const {
  DeviceProps props;
  props.name = name_;
  props.description = absl::StrFormat(
      "simulated accelerator: %s, %.4g TFLOP/s, %.4g GB/s memory, "
      "h2d %.4g GB/s, d2h %.4g GB/s, d2d %.4g GB/s, latency %.4g us",
      FormatBytes(static_cast<double>(config_.mem_bytes)), config_.flops / 1e12,
      config_.mem_bw / 1e9, config_.h2d_bw / 1e9, config_.d2h_bw / 1e9,
      config_.d2d_bw / 1e9, static_cast<double>(config_.latency_ns) / 1e3);
  props.type = DeviceType::kAccel;
  props.memory_total = static_cast<size_t>(config_.mem_bytes);
  props.memory_free = props.memory_total - memory_used();
  props.caps.async = true;
  props.caps.host_buffer = true;
  props.caps.buffer_from_host_ptr = true;
  props.caps.events = true;
  props.modelled_clock = true;
  return props;
}

absl::StatusOr<std::unique_ptr<Buffer>> SimDevice::BufferFromHostPointer(
    void* data, size_t size) {
  if (data == nullptr || size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": cannot register ", size, " bytes at ",
                     reinterpret_cast<uintptr_t>(data)));
  }
  if (sim_internal::PinnedRanges::Global().Contains(data, size)) {
    return absl::AlreadyExistsError(
        absl::StrCat(name_, ": that host memory is pinned already"));
  }
  return std::unique_ptr<Buffer>(
      new SimPinnedBuffer(&pinned_type_, data, size, /*mapped=*/0));
}

absl::StatusOr<std::unique_ptr<Backend>> SimDevice::CreateBackend(
    absl::string_view params) {
  if (!params.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": backends take no parameters (got '", params,
                     "'); configure the device instead"));
  }
  return std::unique_ptr<Backend>(new SimBackend(*this));
}

absl::Status SimDevice::CheckOp(const Tensor& node) const {
  if (!config_.SupportsOp(node.op)) {
    return absl::UnimplementedError(
        absl::StrCat(name_, ": op ", OpName(node.op), " of '", node.name,
                     "' is not in this device's op set"));
  }
  return cpu_kernels::CheckSupported(node);
}

bool SimDevice::SupportsBufferType(const BufferType* type) const {
  return type == &buffer_type_;
}

bool SimDevice::OffloadOp(const Tensor& node) const {
  return node.op != Op::kGetRows && node.ne[1] >= 32;
}

size_t SimDevice::memory_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

void SimDevice::SetFaults(const SimFaults& faults) {
  fail_alloc_.store(faults.alloc);
  fail_copy_.store(faults.copy);
  fail_kernel_.store(faults.kernel);
}

SimEngineStats SimDevice::stats(SimEngineKind kind) const {
  return engine(kind).stats();
}

std::vector<DeviceCounters> SimDevice::engine_stats() const {
  std::vector<DeviceCounters> out;
  for (int i = 0; i < kNumSimEngines; ++i) {
    const SimEngineStats s = stats(static_cast<SimEngineKind>(i));
    DeviceCounters e;
    e.name = engines_[static_cast<size_t>(i)]->name();
    e.busy_ns = s.busy_ns;
    e.ops = s.ops;
    e.bytes =
        static_cast<SimEngineKind>(i) == SimEngineKind::kCompute ? 0 : s.bytes;
    out.push_back(std::move(e));
  }
  return out;
}

bool SimDevice::guarded() const { return memory_->guarded(); }

sim_internal::SimEngine& SimDevice::engine(SimEngineKind kind) const {
  return *engines_[static_cast<size_t>(kind)];
}

char* SimDevice::Translate(const void* address, size_t size) const {
  return memory_->Translate(address, size);
}

void SimDevice::ResetStats() {
  for (auto& engine : engines_) engine->ResetStats();
}

int64_t SimDevice::ModelNowNanos() const {
  return sim_internal::ModelNowNanos(config_.time_scale);
}

void SimDevice::Synchronize() {
  wait_engine_->Synchronize();
  for (auto& engine : engines_) engine->Synchronize();
}

absl::StatusOr<int64_t> SimDevice::EventTime(const Event& event) {
  if (!event.IsComplete()) {
    return absl::FailedPreconditionError("the event has not completed");
  }
  std::optional<int64_t> time =
      sim_internal::EventTimes::Global().Lookup(event);
  if (!time) {
    return absl::NotFoundError("the event was not completed by a sim engine");
  }
  return *time;
}

absl::StatusOr<std::unique_ptr<Buffer>> SimDevice::AllocateDevice(size_t size) {
  if (size > config_.max_alloc()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": allocation of ", size,
                     " bytes exceeds the maximum of ", config_.max_alloc()));
  }
  const size_t accounted = (size + SimBufferType::kAlignment - 1) /
                           SimBufferType::kAlignment *
                           SimBufferType::kAlignment;
  if (TakeFault(fail_alloc_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name_, ": injected fault: allocation of ", size, " bytes"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (accounted > config_.mem_bytes - used_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          name_, ": out of device memory: cannot allocate ", size,
          " bytes with ", used_, " of ", config_.mem_bytes, " bytes in use"));
    }
    used_ += accounted;
  }
  absl::StatusOr<char*> base = memory_->Map(size);
  if (!base.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    used_ -= accounted;
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": ", base.status().message()));
  }
  return std::unique_ptr<Buffer>(
      new SimBuffer(&buffer_type_, this, *base, size));
}

void SimDevice::FreeDevice(char* base, size_t size) {
  memory_->Unmap(base);
  const size_t accounted = (size + SimBufferType::kAlignment - 1) /
                           SimBufferType::kAlignment *
                           SimBufferType::kAlignment;
  std::lock_guard<std::mutex> lock(mu_);
  used_ -= accounted;
}

absl::StatusOr<char*> SimDevice::TensorAlias(const Tensor& tensor,
                                             size_t offset, size_t size,
                                             absl::string_view what) const {
  if (tensor.buffer == nullptr || tensor.data == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": ", what, " of tensor '", tensor.name,
                     "', which has no memory; allocate it first"));
  }
  if (tensor.buffer->type() != &buffer_type_) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": ", what, " of tensor '", tensor.name, "', which is in ",
        tensor.buffer->type()->name(), " memory, not ", name_, "'s"));
  }
  const size_t bytes = static_cast<size_t>(tensor.NumBytes());
  if (offset > bytes || size > bytes - offset) {
    return absl::OutOfRangeError(
        absl::StrCat(name_, ": ", what, " of bytes [", offset, ", ",
                     offset + size, ") of tensor '", tensor.name, "' ",
                     tensor.ShapeString(), " of ", bytes, " bytes"));
  }
  char* alias = Translate(static_cast<const char*>(tensor.data) + offset, size);
  if (alias == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": ", what, " of tensor '", tensor.name,
        "': its data is outside every live allocation of ", name_));
  }
  return alias;
}

bool SimDevice::TakeFault(std::atomic<int64_t>& countdown) {
  int64_t value = countdown.load();
  while (value > 0 && !countdown.compare_exchange_weak(value, value - 1)) {
  }
  return value == 1;
}

int64_t SimDevice::CopyNanos(size_t bytes, double bandwidth,
                             bool latency) const {
  return (latency ? config_.latency_ns : 0) +
         static_cast<int64_t>(
             std::llround(static_cast<double>(bytes) * 1e9 / bandwidth));
}

int64_t SimDevice::KernelNanos(int64_t flops, int64_t bytes) const {
  const double seconds = std::max(static_cast<double>(flops) / config_.flops,
                                  static_cast<double>(bytes) / config_.mem_bw);
  return config_.launch_ns + static_cast<int64_t>(std::llround(seconds * 1e9));
}

absl::Status SimDevice::RunSync(
    SimEngineKind kind,
    absl::AnyInvocable<absl::Status(std::vector<SimWork>&) &&> body) {
  auto status = std::make_shared<absl::Status>();
  Event done = engine(kind).Enqueue(
      {}, std::move(body),
      [status](absl::Status result, int64_t) { *status = std::move(result); });
  FERRY_RETURN_IF_ERROR(done.WaitBlocking());
  return *status;
}

void* SimDevice::ComputeScratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    const size_t rounded = cpu_kernels::RoundUpToScratchAlignment(bytes);
    scratch_.reset(std::aligned_alloc(cpu_kernels::kScratchAlignment, rounded));
    FERRY_CHECK(scratch_ != nullptr);
    scratch_bytes_ = rounded;
  }
  return scratch_.get();
}

absl::Status RegisterSimFamily(Registry& registry) {
  if (registry.HasFamily("sim")) return absl::OkStatus();
  return registry.RegisterFamily(
      "sim",
      [](int index,
         absl::string_view options) -> absl::StatusOr<std::unique_ptr<Device>> {
        FERRY_ASSIGN_OR_RETURN(
            std::unique_ptr<SimDevice> device,
            SimDevice::Create(absl::StrCat("sim", index), options));
        return std::unique_ptr<Device>(std::move(device));
      });
}

}  // namespace ferry
