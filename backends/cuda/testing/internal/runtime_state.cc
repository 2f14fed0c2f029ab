#include "ferry/backends/cuda/testing/internal/runtime_state.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "ferry/backends/cuda/testing/internal/kernel_registry.h"

namespace ferry::fake_cuda_internal {

// --- Progress and gates. ---

bool Progress::Reached(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= seq;
}

void Progress::WaitFor(uint64_t seq) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= seq; });
}

void Progress::Complete(uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    completed_ = std::max(completed_, seq);
  }
  cv_.notify_all();
}

void GateState::Open() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
  }
  cv_.notify_all();
}

bool GateState::Reached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reached_;
}

void GateState::Pass() {
  std::unique_lock<std::mutex> lock(mu_);
  reached_ = true;
  cv_.wait(lock, [this] { return open_; });
}

// --- Errors. ---

bool IsStickyError(cudaError_t error) {
  switch (error) {
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorExternalDevice:
      return true;
    default:
      return false;
  }
}

ThreadState& ThisThread() {
  thread_local ThreadState state;
  return state;
}

namespace {

std::atomic<bool> started{false};

absl::StatusOr<size_t> ParseBytes(absl::string_view text) {
  size_t scale = 1;
  if (absl::ConsumeSuffix(&text, "GiB")) {
    scale = size_t{1} << 30;
  } else if (absl::ConsumeSuffix(&text, "MiB")) {
    scale = size_t{1} << 20;
  } else if (absl::ConsumeSuffix(&text, "KiB")) {
    scale = size_t{1} << 10;
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", text, "'"));
  }
  return static_cast<size_t>(value) * scale;
}

}  // namespace

fake_cuda::Config ConfigFromEnvironment() {
  fake_cuda::Config config;
  const char* env = std::getenv("FERRY_FAKE_CUDA");
  if (env == nullptr) return config;
  for (absl::string_view item : absl::StrSplit(env, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    int value = 0;
    bool ok = true;
    if (kv.first == "devices") {
      ok = absl::SimpleAtoi(kv.second, &config.device_count) &&
           config.device_count >= 0 && config.device_count <= 16;
    } else if (kv.first == "memory") {
      absl::StatusOr<size_t> bytes = ParseBytes(kv.second);
      ok = bytes.ok();
      if (ok) config.memory_bytes = *bytes;
    } else if (kv.first == "driver") {
      ok = absl::SimpleAtoi(kv.second, &config.driver_version);
    } else if (kv.first == "peer") {
      ok = absl::SimpleAtoi(kv.second, &value);
      config.peer_access = value != 0;
    } else if (kv.first == "guard") {
      ok = absl::SimpleAtoi(kv.second, &value);
      config.guard_device_memory = value != 0;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "fake CUDA: FERRY_FAKE_CUDA: cannot use '%.*s' (keys: "
                   "devices, memory, driver, peer, guard)\n",
                   static_cast<int>(item.size()), item.data());
      std::abort();
    }
  }
  return config;
}

fake_cuda::Config& Runtime::PendingConfig() {
  static fake_cuda::Config* const config =
      new fake_cuda::Config(ConfigFromEnvironment());
  return *config;
}

Runtime& Runtime::Get() {
  static Runtime* const runtime = [] {
    started.store(true);
    return new Runtime(PendingConfig());
  }();
  return *runtime;
}

bool Runtime::Started() { return started.load(); }

Runtime::Runtime(const fake_cuda::Config& config)
    : config_(config), memory_(config.guard_device_memory) {
  for (int i = 0; i < config_.device_count; ++i) {
    auto device = std::make_unique<DeviceState>();
    device->can_access.assign(config_.device_count, config_.peer_access);
    device->can_access[i] = false;
    devices_.push_back(std::move(device));
  }
}

cudaError_t Runtime::Enter() {
  api_calls_.fetch_add(1, std::memory_order_relaxed);
  if (config_.driver_version < fake_cuda::kRuntimeVersion) {
    return Fail(cudaErrorInsufficientDriver);
  }
  return cudaSuccess;
}

cudaError_t Runtime::EnterDevice(int device) {
  if (cudaError_t error = Enter(); error != cudaSuccess) return error;
  if (!ValidDevice(device)) return Fail(cudaErrorInvalidDevice);
  if (cudaError_t sticky = Sticky(device); sticky != cudaSuccess) {
    return Fail(sticky);
  }
  return cudaSuccess;
}

cudaError_t Runtime::Fail(cudaError_t error) {
  if (error != cudaSuccess) ThisThread().last_error = error;
  return error;
}

cudaError_t Runtime::Fail(cudaError_t error, absl::string_view why) {
  std::fprintf(stderr, "fake CUDA: %s: %.*s\n", cudaGetErrorName(error),
               static_cast<int>(why.size()), why.data());
  return Fail(error);
}

cudaError_t Runtime::LastError(bool clear) {
  ThreadState& thread = ThisThread();
  cudaError_t error = thread.last_error;
  // A sticky error is never cleared: it is the context's.
  if (ValidDevice(thread.device)) {
    const cudaError_t sticky = Sticky(thread.device);
    if (sticky != cudaSuccess) return sticky;
  }
  if (clear) thread.last_error = cudaSuccess;
  return error;
}

cudaError_t Runtime::Sticky(int device) const {
  if (!ValidDevice(device)) return cudaSuccess;
  return static_cast<cudaError_t>(
      devices_[device]->sticky.load(std::memory_order_acquire));
}

void Runtime::MakeSticky(int device, cudaError_t error, absl::string_view why) {
  if (!ValidDevice(device)) return;
  int expected = cudaSuccess;
  if (devices_[device]->sticky.compare_exchange_strong(expected, error)) {
    std::fprintf(stderr, "fake CUDA: cuda%d: %s (sticky): %.*s\n", device,
                 cudaGetErrorName(error), static_cast<int>(why.size()),
                 why.data());
  }
}

void Runtime::ClearSticky(int device) {
  if (ValidDevice(device)) devices_[device]->sticky.store(cudaSuccess);
}

void Runtime::Fault(int device, cudaError_t error, absl::string_view why) {
  MakeSticky(device, error, why);
}

void Runtime::TouchContext(int device) {
  if (ValidDevice(device)) devices_[device]->context.store(true);
}

bool Runtime::HasContext(int device) const {
  return ValidDevice(device) && devices_[device]->context.load();
}

// --- Peers. ---

bool Runtime::CanAccessPeer(int device, int peer) const {
  if (!ValidDevice(device) || !ValidDevice(peer)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return devices_[device]->can_access[peer];
}

void Runtime::SetCanAccessPeer(int device, int peer, bool can) {
  if (!ValidDevice(device) || !ValidDevice(peer) || device == peer) return;
  std::lock_guard<std::mutex> lock(mu_);
  devices_[device]->can_access[peer] = can;
}

cudaError_t Runtime::EnablePeer(int device, int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!devices_[device]->can_access[peer]) {
    return cudaErrorPeerAccessUnsupported;
  }
  if (!devices_[device]->peers_enabled.insert(peer).second) {
    return cudaErrorPeerAccessAlreadyEnabled;
  }
  peer_enables_.fetch_add(1);
  return cudaSuccess;
}

bool Runtime::PeerEnabled(int device, int peer) const {
  if (!ValidDevice(device) || !ValidDevice(peer)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return devices_[device]->peers_enabled.contains(peer);
}

// --- Streams. ---

CUstream_st* Runtime::NewStreamLocked(int device, bool blocking, bool legacy) {
  auto* stream = new CUstream_st();
  stream->id = next_stream_id_++;
  stream->device = device;
  stream->blocking = blocking;
  stream->legacy = legacy;
  stream->progress = std::make_shared<Progress>();
  stream->worker = std::thread([this, stream] { Loop(stream); });
  streams_.insert(stream);
  return stream;
}

CUstream_st* Runtime::LegacyStream(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceState& state = *devices_[device];
  if (state.legacy == nullptr) {
    state.legacy = NewStreamLocked(device, /*blocking=*/true, /*legacy=*/true);
  }
  return state.legacy;
}

CUstream_st* Runtime::Resolve(cudaStream_t stream, cudaError_t* error) {
  *error = cudaSuccess;
  if (stream == nullptr || stream == cudaStreamLegacy) {
    const int device = ThisThread().device;
    if (!ValidDevice(device)) {
      *error = cudaErrorInvalidDevice;
      return nullptr;
    }
    TouchContext(device);
    return LegacyStream(device);
  }
  if (stream == cudaStreamPerThread) {
    *error = cudaErrorNotSupported;
    std::fprintf(stderr,
                 "fake CUDA: cudaStreamPerThread is not modelled; use a "
                 "stream of your own\n");
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!streams_.contains(stream)) {
    *error = cudaErrorInvalidResourceHandle;
    return nullptr;
  }
  return stream;
}

CUstream_st* Runtime::CreateStream(int device, bool blocking) {
  TouchContext(device);
  std::lock_guard<std::mutex> lock(mu_);
  return NewStreamLocked(device, blocking, /*legacy=*/false);
}

void Runtime::DestroyStream(CUstream_st* stream) {
  WaitStream(stream);
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(stream);
  }
  {
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->stopping = true;
  }
  stream->cv.notify_all();
  stream->worker.join();
  delete stream;
}

uint64_t Runtime::Enqueue(CUstream_st* stream, Op op) {
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceState& device = *devices_[stream->device];
    // The legacy default stream waits for every blocking stream of its
    // device, and blocking streams wait for it.
    if (stream->legacy) {
      legacy_stream_ops_.fetch_add(1, std::memory_order_relaxed);
      for (CUstream_st* other : streams_) {
        if (other == stream || other->device != stream->device ||
            !other->blocking) {
          continue;
        }
        op.deps.push_back(Dependency{other->progress, other->submitted});
        stream->clock.Join(other->clock);
      }
    } else if (stream->blocking && device.legacy != nullptr) {
      op.deps.push_back(
          Dependency{device.legacy->progress, device.legacy->submitted});
      stream->clock.Join(device.legacy->clock);
    }
    seq = ++stream->submitted;
    op.seq = seq;
    stream->clock.Set(stream->id, seq);
    if (!op.accesses.empty()) {
      OpInfo info{stream->id, seq,
                  absl::StrCat(op.label, " on cuda", stream->device,
                               stream->legacy ? "'s legacy stream" : " stream ",
                               stream->legacy ? "" : absl::StrCat(stream->id))};
      Report(races_.Add(info, stream->clock, op.accesses));
    }
  }
  {
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->queue.push_back(std::move(op));
  }
  stream->cv.notify_one();
  return seq;
}

uint64_t Runtime::Mark(CUstream_st* stream, std::string label) {
  Op op;
  op.label = std::move(label);
  return Enqueue(stream, std::move(op));
}

void Runtime::Loop(CUstream_st* stream) {
  while (true) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(stream->mu);
      stream->cv.wait(
          lock, [&] { return stream->stopping || !stream->queue.empty(); });
      if (stream->queue.empty()) return;
      op = std::move(stream->queue.front());
      stream->queue.pop_front();
    }
    for (const Dependency& dep : op.deps) dep.progress->WaitFor(dep.seq);
    if (op.gate != nullptr) op.gate->Pass();
    if (op.is_copy) {
      const int64_t latency = copy_latency_ns_.load(std::memory_order_relaxed);
      if (latency > 0) absl::SleepFor(absl::Nanoseconds(latency));
    }
    if (op.body && Sticky(stream->device) == cudaSuccess) {
      const cudaError_t error = std::move(op.body)();
      if (error != cudaSuccess) {
        Fault(stream->device, error, absl::StrCat(op.label, " failed"));
      }
    }
    if (!op.accesses.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      races_.Remove(stream->id, op.seq);
    }
    stream->progress->Complete(op.seq);
  }
}

void Runtime::WaitStream(CUstream_st* stream) {
  uint64_t target = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    target = stream->submitted;
  }
  stream->progress->WaitFor(target);
}

bool Runtime::StreamIdle(CUstream_st* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return stream->progress->Reached(stream->submitted);
}

void Runtime::WaitDevice(int device) {
  std::vector<std::pair<std::shared_ptr<Progress>, uint64_t>> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (CUstream_st* stream : streams_) {
      if (stream->device == device) {
        targets.emplace_back(stream->progress, stream->submitted);
      }
    }
  }
  for (auto& [progress, seq] : targets) progress->WaitFor(seq);
}

void Runtime::RecordEvent(CUevent_st* event, CUstream_st* stream) {
  const uint64_t seq = Mark(stream, "cudaEventRecord");
  std::lock_guard<std::mutex> lock(mu_);
  event->recorded = true;
  event->progress = stream->progress;
  event->seq = seq;
  event->clock = stream->clock;
}

void Runtime::WaitEvent(CUstream_st* stream, CUevent_st* event) {
  Op op;
  op.label = "cudaStreamWaitEvent";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!event->recorded) return;  // Waits for nothing, as in CUDA.
    op.deps.push_back(Dependency{event->progress, event->seq});
    stream->clock.Join(event->clock);
  }
  Enqueue(stream, std::move(op));
}

bool Runtime::EventDone(CUevent_st* event) {
  std::shared_ptr<Progress> progress;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!event->recorded) return true;
    progress = event->progress;
    seq = event->seq;
  }
  return progress->Reached(seq);
}

void Runtime::WaitEventDone(CUevent_st* event) {
  std::shared_ptr<Progress> progress;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!event->recorded) return;
    progress = event->progress;
    seq = event->seq;
  }
  progress->WaitFor(seq);
}

bool Runtime::NotReadyStorm() {
  std::lock_guard<std::mutex> lock(mu_);
  if (not_ready_left_ <= 0) return false;
  --not_ready_left_;
  return true;
}

// --- Kernels. ---

namespace {

// Device addresses of a launch, translated for its emulation.
class LaunchTranslator final : public fake_cuda::AddressTranslator {
 public:
  LaunchTranslator(const DeviceMemory& memory,
                   const std::vector<fake_cuda::MemoryAccess>& accesses)
      : memory_(memory), accesses_(accesses) {}
  void* Translate(const void* address, size_t bytes) const override {
    const uintptr_t p = reinterpret_cast<uintptr_t>(address);
    for (const fake_cuda::MemoryAccess& a : accesses_) {
      const uintptr_t begin = reinterpret_cast<uintptr_t>(a.address);
      if (p >= begin && bytes <= a.bytes && p - begin <= a.bytes - bytes) {
        return memory_.Translate(address, bytes);
      }
    }
    return nullptr;
  }

 private:
  const DeviceMemory& memory_;
  const std::vector<fake_cuda::MemoryAccess>& accesses_;
};

bool ValidShape(dim3 grid, dim3 block) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  return threads >= 1 && threads <= 1024 && block.z <= 64 && grid.x >= 1 &&
         grid.x <= 0x7fffffffu && grid.y >= 1 && grid.y <= 65535 &&
         grid.z >= 1 && grid.z <= 65535;
}

}  // namespace

cudaError_t Runtime::CountLaunch(int device, cudaError_t* execution_fault) {
  launches_.fetch_add(1, std::memory_order_relaxed);
  *execution_fault = cudaSuccess;
  cudaError_t error = cudaSuccess;
  fake_cuda::FaultSurface surface;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (launch_fault_in_ == 0 || --launch_fault_in_ > 0) return cudaSuccess;
    error = launch_fault_error_;
    surface = launch_fault_surface_;
  }
  if (surface == fake_cuda::FaultSurface::kAtExecution) {
    *execution_fault = error;
    return cudaSuccess;
  }
  if (IsStickyError(error)) {
    MakeSticky(device, error, "injected at a launch");
  }
  return Fail(error);
}

cudaError_t Runtime::Launch(const void* kernel, dim3 grid, dim3 block,
                            void** args, size_t shared_bytes,
                            cudaStream_t stream_handle) {
  if (cudaError_t error = Enter(); error != cudaSuccess) return error;
  cudaError_t error = cudaSuccess;
  CUstream_st* stream = Resolve(stream_handle, &error);
  if (stream == nullptr) return Fail(error);
  const int device = stream->device;
  if (cudaError_t sticky = Sticky(device); sticky != cudaSuccess) {
    return Fail(sticky);
  }
  if (!ValidShape(grid, block)) {
    return Fail(cudaErrorInvalidConfiguration,
                absl::StrCat("launch of ", KernelRegistry::Get().Symbol(kernel),
                             " with grid ", grid.x, "x", grid.y, "x", grid.z,
                             ", block ", block.x, "x", block.y, "x", block.z));
  }
  absl::StatusOr<fake_cuda::KernelEmulator> emulator =
      KernelRegistry::Get().Find(kernel);
  if (!emulator.ok()) {
    return Fail(cudaErrorInvalidDeviceFunction, emulator.status().message());
  }
  fake_cuda::LaunchShape shape{grid, block, shared_bytes};
  absl::StatusOr<fake_cuda::KernelRun> bound = (*emulator)(args, shape);
  if (!bound.ok()) {
    return Fail(cudaErrorInvalidValue, bound.status().message());
  }
  cudaError_t execution_fault = cudaSuccess;
  if (cudaError_t now = CountLaunch(device, &execution_fault);
      now != cudaSuccess) {
    return now;
  }
  const std::string symbol = KernelRegistry::Get().Symbol(kernel);
  Op op;
  op.label = absl::StrCat("kernel ", symbol);
  for (const fake_cuda::MemoryAccess& a : bound->accesses) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(a.address);
    op.accesses.push_back(AccessRange{begin, begin + a.bytes, a.write});
  }
  auto run = std::make_shared<fake_cuda::KernelRun>(*std::move(bound));
  op.body = [this, run, device, symbol, execution_fault]() -> cudaError_t {
    if (execution_fault != cudaSuccess) {
      Fault(device, execution_fault,
            absl::StrCat("kernel ", symbol, ": injected fault"));
      return execution_fault;
    }
    // A GPU faults on an address outside every allocation it can reach.
    for (const fake_cuda::MemoryAccess& a : run->accesses) {
      if (a.bytes == 0) continue;
      const PointerInfo info = memory_.Classify(a.address, a.bytes);
      const bool reachable =
          info.kind == PointerKind::kDevice &&
          (info.device == device || PeerEnabled(device, info.device));
      if (!reachable) {
        Fault(device, cudaErrorIllegalAddress,
              absl::StrCat("kernel ", symbol, " touches ", a.bytes,
                           " bytes at ", memory_.Describe(a.address),
                           info.kind == PointerKind::kDevice
                               ? " without peer access"
                               : ""));
        return cudaErrorIllegalAddress;
      }
    }
    LaunchTranslator translator(memory_, run->accesses);
    absl::Status status = std::move(run->run)(translator);
    if (!status.ok()) {
      // A fault the emulation names (fake_cuda::KernelFault), else a
      // launch failure.
      cudaError_t error = cudaErrorLaunchFailure;
      if (absl::optional<absl::Cord> code =
              status.GetPayload(kKernelFaultPayload)) {
        int value = 0;
        if (absl::SimpleAtoi(std::string(*code), &value)) {
          error = static_cast<cudaError_t>(value);
        }
      }
      Fault(device, error,
            absl::StrCat("kernel ", symbol, ": ", status.message()));
      return error;
    }
    return cudaSuccess;
  };
  Enqueue(stream, std::move(op));
  return cudaSuccess;
}

// --- Fault injection, accounting, stats. ---

void Runtime::InjectLaunchFault(int nth, cudaError_t error,
                                fake_cuda::FaultSurface surface) {
  std::lock_guard<std::mutex> lock(mu_);
  launch_fault_in_ = nth;
  launch_fault_error_ = error;
  launch_fault_surface_ = surface;
}

void Runtime::InjectAllocationFailure(int nth) {
  std::lock_guard<std::mutex> lock(mu_);
  allocation_fault_in_ = nth;
}

void Runtime::InjectHostRegisterError(int nth, cudaError_t error) {
  std::lock_guard<std::mutex> lock(mu_);
  host_register_fault_in_ = nth;
  host_register_error_ = error;
}

void Runtime::InjectNotReady(int count) {
  std::lock_guard<std::mutex> lock(mu_);
  not_ready_left_ = count;
}

void Runtime::SetCopyLatency(absl::Duration latency) {
  copy_latency_ns_.store(absl::ToInt64Nanoseconds(latency));
}

void Runtime::ClearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  launch_fault_in_ = 0;
  allocation_fault_in_ = 0;
  host_register_fault_in_ = 0;
  not_ready_left_ = 0;
}

bool Runtime::AllocationFails() {
  std::lock_guard<std::mutex> lock(mu_);
  return allocation_fault_in_ > 0 && --allocation_fault_in_ == 0;
}

cudaError_t Runtime::HostRegisterFault() {
  std::lock_guard<std::mutex> lock(mu_);
  if (host_register_fault_in_ == 0 || --host_register_fault_in_ > 0) {
    return cudaSuccess;
  }
  return host_register_error_;
}

bool Runtime::Reserve(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceState& state = *devices_[device];
  if (bytes > config_.memory_bytes - state.used) return false;
  state.used += bytes;
  return true;
}

void Runtime::Release(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  devices_[device]->used -= bytes;
}

size_t Runtime::Used(int device) const {
  if (!ValidDevice(device)) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  return devices_[device]->used;
}

fake_cuda::Stats Runtime::stats() const {
  fake_cuda::Stats stats;
  stats.api_calls = api_calls_.load();
  stats.launches = launches_.load();
  stats.mallocs = mallocs_.load();
  stats.failed_mallocs = failed_mallocs_.load();
  stats.frees = frees_.load();
  stats.device_synchronizes = device_synchronizes_.load();
  stats.legacy_stream_ops = legacy_stream_ops_.load();
  stats.peer_enables = peer_enables_.load();
  return stats;
}

void Runtime::SetRaceMode(fake_cuda::RaceMode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  race_mode_ = mode;
}

std::vector<std::string> Runtime::TakeRaceReports() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(race_reports_, {});
}

void Runtime::Report(std::vector<std::string> reports) {
  if (reports.empty()) return;
  for (const std::string& report : reports) {
    std::fprintf(stderr, "%s\n", report.c_str());
  }
  if (race_mode_ == fake_cuda::RaceMode::kAbort) {
    std::fprintf(stderr,
                 "fake CUDA: aborting on a device-memory race (see "
                 "backends/cuda/testing/fake_cuda_control.h)\n");
    std::abort();
  }
  for (std::string& report : reports) {
    race_reports_.push_back(std::move(report));
  }
}

void Runtime::CheckFreeWhileInFlight(const void* begin, size_t bytes,
                                     absl::string_view what) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(begin);
  bool raced = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A free is a write no operation is ordered before: any in-flight
    // access of the range races with it.
    VectorClock none;
    OpInfo info{0, 0, std::string(what)};
    std::vector<std::string> reports =
        races_.Add(info, none, {AccessRange{b, b + bytes, true}});
    races_.Remove(0, 0);
    raced = !reports.empty();
    Report(std::move(reports));
  }
  // Reported (when recording): let that work finish before the memory
  // goes, so the report is all that happens.
  if (raced) {
    for (int device = 0; device < config_.device_count; ++device) {
      WaitDevice(device);
    }
  }
}

}  // namespace ferry::fake_cuda_internal
