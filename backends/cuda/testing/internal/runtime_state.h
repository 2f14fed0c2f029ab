// The fake CUDA runtime's state: devices and their contexts, the calling
// thread's current device and last error, sticky errors, streams (each an
// in-order queue run by its own thread), events, memory, the race check and
// fault injection. cudart_entry_points.cc and cublas_entry_points.cc
// implement the C APIs on it; fake_cuda_control.h is the control API tests
// use.
#ifndef FERRY_BACKENDS_CUDA_TESTING_INTERNAL_RUNTIME_STATE_H_
#define FERRY_BACKENDS_CUDA_TESTING_INTERNAL_RUNTIME_STATE_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ferry/backends/cuda/testing/fake_cuda_control.h"
#include "ferry/backends/cuda/testing/internal/device_memory.h"
#include "ferry/backends/cuda/testing/internal/race_checker.h"

namespace ferry::fake_cuda_internal {

// The status payload (a decimal cudaError_t) of fake_cuda::KernelFault.
inline constexpr char kKernelFaultPayload[] = "ferry.fake_cuda.kernel_fault";

// How far a stream has run; its operations complete in order. Thread-safe.
class Progress {
 public:
  bool Reached(uint64_t seq) const;
  void WaitFor(uint64_t seq) const;
  void Complete(uint64_t seq);

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
};

// A hold on a stream (fake_cuda::HoldStream). Thread-safe.
class GateState final : public fake_cuda::Gate {
 public:
  void Open() override;
  bool Reached() const override;
  // Called by the stream's thread: marks the gate reached, waits for Open.
  void Pass();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  bool reached_ ABSL_GUARDED_BY(mu_) = false;
};

struct Dependency {
  std::shared_ptr<Progress> progress;
  uint64_t seq = 0;
};

// One operation of a stream.
struct Op {
  std::string label;
  std::vector<Dependency> deps;  // Waited for before it runs.
  std::shared_ptr<GateState> gate;
  // Runs on the stream's thread unless the device has a sticky error; an
  // error it returns becomes the device's sticky error.
  absl::AnyInvocable<cudaError_t() &&> body;
  std::vector<AccessRange> accesses;  // For the race check.
  bool is_copy = false;               // Takes the configured copy latency.
  uint64_t seq = 0;
};

}  // namespace ferry::fake_cuda_internal

// cudaStream_t points at one. Its queue is run by its own thread.
struct CUstream_st {
  int id = 0;  // Index in vector clocks.
  int device = 0;
  bool blocking = true;  // Synchronizes with the legacy default stream.
  bool legacy = false;
  std::shared_ptr<ferry::fake_cuda_internal::Progress> progress;
  // Guarded by the runtime's lock.
  uint64_t submitted = 0;
  ferry::fake_cuda_internal::VectorClock clock;
  // The queue.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<ferry::fake_cuda_internal::Op> queue;
  bool stopping = false;
  std::thread worker;
};

// cudaEvent_t points at one.
struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  // Guarded by the runtime's lock.
  bool recorded = false;
  std::shared_ptr<ferry::fake_cuda_internal::Progress> progress;
  uint64_t seq = 0;
  ferry::fake_cuda_internal::VectorClock clock;
};

namespace ferry::fake_cuda_internal {

// CUDA's sticky errors: the context is unusable afterwards.
bool IsStickyError(cudaError_t error);

// The calling thread's runtime state.
struct ThreadState {
  int device = 0;
  cudaError_t last_error = cudaSuccess;
  struct LaunchConfig {
    dim3 grid;
    dim3 block;
    size_t shared_bytes = 0;
    cudaStream_t stream = nullptr;
  };
  std::vector<LaunchConfig> configs;  // __cudaPushCallConfiguration's.
};
ThreadState& ThisThread();

// Thread-safe.
class Runtime {
 public:
  // The process's runtime, made from the configuration on first use.
  static Runtime& Get();
  // Whether Get() has been called.
  static bool Started();
  // The configuration Get() will use (or used).
  static fake_cuda::Config& PendingConfig();

  const fake_cuda::Config& config() const { return config_; }
  DeviceMemory& memory() { return memory_; }

  // --- Calls and errors. ---

  // Counts an API call and checks the driver: cudaErrorInsufficientDriver
  // (recorded as the last error) when it is older than the runtime.
  cudaError_t Enter();
  // Enter() plus: `device` valid (cudaErrorInvalidDevice) and without a
  // sticky error (returned, and recorded).
  cudaError_t EnterDevice(int device);
  // Records `error` as the calling thread's last error; returns it.
  cudaError_t Fail(cudaError_t error);
  // Fail() with a note on stderr saying why (for misuse worth reading).
  cudaError_t Fail(cudaError_t error, absl::string_view why);
  cudaError_t LastError(bool clear);
  cudaError_t Sticky(int device) const;
  // Makes `error` the device's sticky error (the first one stays).
  void MakeSticky(int device, cudaError_t error, absl::string_view why);
  void ClearSticky(int device);
  bool ValidDevice(int device) const {
    return device >= 0 && device < config_.device_count;
  }
  // Creates `device`'s primary context if it has none.
  void TouchContext(int device);
  bool HasContext(int device) const;

  // --- Peers. ---
  bool CanAccessPeer(int device, int peer) const;
  void SetCanAccessPeer(int device, int peer, bool can);
  // cudaSuccess, or cudaErrorPeerAccessAlreadyEnabled/Unsupported.
  cudaError_t EnablePeer(int device, int peer);
  bool PeerEnabled(int device, int peer) const;

  // --- Streams and events. ---

  // The stream `stream` names for the calling thread (0 and
  // cudaStreamLegacy: the current device's legacy stream); nullptr, with
  // *error set, if it names none.
  CUstream_st* Resolve(cudaStream_t stream, cudaError_t* error);
  CUstream_st* LegacyStream(int device);
  CUstream_st* CreateStream(int device, bool blocking);
  // Waits until the stream ran everything, then stops it.
  void DestroyStream(CUstream_st* stream);
  // Enqueues `op`: adds the legacy stream's implicit dependencies, orders
  // it (clock), checks it for races. Returns its sequence number.
  uint64_t Enqueue(CUstream_st* stream, Op op);
  // An empty operation on `stream` (a point to wait for); its seq.
  uint64_t Mark(CUstream_st* stream, std::string label);
  // Blocks until `stream` ran everything enqueued so far.
  void WaitStream(CUstream_st* stream);
  void WaitDevice(int device);
  bool StreamIdle(CUstream_st* stream);
  // The stream's progress and the point recorded now, for an event.
  void RecordEvent(CUevent_st* event, CUstream_st* stream);
  void WaitEvent(CUstream_st* stream, CUevent_st* event);
  // Whether the recorded work of `event` is done; blocks until it is.
  bool EventDone(CUevent_st* event);
  void WaitEventDone(CUevent_st* event);
  // Consumes one injected not-ready answer, if any.
  bool NotReadyStorm();

  // --- Kernels. ---

  // Enqueues a launch of `kernel` (a host stub address): cudaSuccess or
  // the error the launch call returns (recorded).
  cudaError_t Launch(const void* kernel, dim3 grid, dim3 block, void** args,
                     size_t shared_bytes, cudaStream_t stream);
  // Counts a launch for fault injection (kernels and GEMMs): cudaSuccess,
  // the error to return now (kAtLaunch; the device is sticky), or, in
  // *execution_fault, the error the launch must fail with when it runs.
  cudaError_t CountLaunch(int device, cudaError_t* execution_fault);
  // A device fault from inside an operation: sticky, with a note.
  void Fault(int device, cudaError_t error, absl::string_view why);

  // --- Fault injection, stats. ---
  void InjectLaunchFault(int nth, cudaError_t error,
                         fake_cuda::FaultSurface surface);
  void InjectAllocationFailure(int nth);
  void InjectHostRegisterError(int nth, cudaError_t error);
  void InjectNotReady(int count);
  void ClearFaults();
  void SetCopyLatency(absl::Duration latency);
  // True if this cudaMalloc must fail (injection).
  bool AllocationFails();
  // The error this cudaHostRegister must return (injection), or
  // cudaSuccess.
  cudaError_t HostRegisterFault();
  // Device memory accounting: false if `bytes` more do not fit.
  bool Reserve(int device, size_t bytes);
  void Release(int device, size_t bytes);
  size_t Used(int device) const;

  fake_cuda::Stats stats() const;
  std::atomic<int64_t>& launches() { return launches_; }
  std::atomic<int64_t>& mallocs() { return mallocs_; }
  std::atomic<int64_t>& failed_mallocs() { return failed_mallocs_; }
  std::atomic<int64_t>& frees() { return frees_; }
  std::atomic<int64_t>& device_synchronizes() { return device_synchronizes_; }
  std::atomic<int64_t>& peer_enables() { return peer_enables_; }

  void SetRaceMode(fake_cuda::RaceMode mode);
  std::vector<std::string> TakeRaceReports();
  // Reports in-flight operations touching [begin, begin + bytes) of memory
  // being freed by `what`; when it reported (in record mode) it waits for
  // every device, so the memory outlives them.
  void CheckFreeWhileInFlight(const void* begin, size_t bytes,
                              absl::string_view what);

 private:
  struct DeviceState {
    std::atomic<int> sticky{cudaSuccess};
    std::atomic<bool> context{false};
    size_t used = 0;                // Guarded by mu_.
    CUstream_st* legacy = nullptr;  // Guarded by mu_.
    std::set<int> peers_enabled;    // Guarded by mu_.
    std::vector<bool> can_access;   // Guarded by mu_.
  };

  explicit Runtime(const fake_cuda::Config& config);
  void Loop(CUstream_st* stream);
  CUstream_st* NewStreamLocked(int device, bool blocking, bool legacy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Report(std::vector<std::string> reports)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const fake_cuda::Config config_;
  DeviceMemory memory_;
  std::vector<std::unique_ptr<DeviceState>> devices_;

  mutable std::mutex mu_;
  std::set<CUstream_st*> streams_ ABSL_GUARDED_BY(mu_);
  int next_stream_id_ ABSL_GUARDED_BY(mu_) = 1;
  RaceChecker races_ ABSL_GUARDED_BY(mu_);
  fake_cuda::RaceMode race_mode_ ABSL_GUARDED_BY(mu_) =
      fake_cuda::RaceMode::kAbort;
  std::vector<std::string> race_reports_ ABSL_GUARDED_BY(mu_);
  // Fault injection.
  int launch_fault_in_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none.
  cudaError_t launch_fault_error_ ABSL_GUARDED_BY(mu_) = cudaSuccess;
  fake_cuda::FaultSurface launch_fault_surface_ ABSL_GUARDED_BY(mu_) =
      fake_cuda::FaultSurface::kAtExecution;
  int allocation_fault_in_ ABSL_GUARDED_BY(mu_) = 0;
  int host_register_fault_in_ ABSL_GUARDED_BY(mu_) = 0;
  cudaError_t host_register_error_ ABSL_GUARDED_BY(mu_) = cudaSuccess;
  int not_ready_left_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> copy_latency_ns_{0};

  std::atomic<int64_t> api_calls_{0};
  std::atomic<int64_t> launches_{0};
  std::atomic<int64_t> mallocs_{0};
  std::atomic<int64_t> failed_mallocs_{0};
  std::atomic<int64_t> frees_{0};
  std::atomic<int64_t> device_synchronizes_{0};
  std::atomic<int64_t> legacy_stream_ops_{0};
  std::atomic<int64_t> peer_enables_{0};
};

// Parses FERRY_FAKE_CUDA ("devices=2,memory=64MiB,driver=12080,peer=0,
// guard=0"); aborts with a message on a malformed value (a test's setup
// error).
fake_cuda::Config ConfigFromEnvironment();

}  // namespace ferry::fake_cuda_internal

#endif  // FERRY_BACKENDS_CUDA_TESTING_INTERNAL_RUNTIME_STATE_H_
