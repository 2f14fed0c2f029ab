// SimConfig: what a simulated device is like (memory, speeds, latencies, the
// ops it runs), parsed from a string such as
//
//   "sim:mem=8GiB,flops=20T,bw=1TB/s,h2d=25GB/s,lat=10us,ops=-soft_max,-rope"
//
// and SimFaults, the failures a test can inject into one.
//
// Keys (all optional; defaults are a discrete GPU on PCIe Gen4 x16):
//   mem=8GiB         device memory (accounted, not reserved)
//   max_alloc=       largest single allocation (default: mem)
//   flops=20T        peak FLOP/s of the compute engine (k/M/G/T/P suffixes)
//   bw=1TB/s         device memory bandwidth, for the kernels' roofline
//   h2d=25GB/s       host-to-device copy engine, pinned memory
//   d2h=25GB/s       device-to-host copy engine, pinned memory
//   d2d=50GB/s       device-to-device link to another sim device
//   pageable=        bandwidth of copies from/to pageable host memory
//                    (default: half of h2d or d2h)
//   lat=10us         latency of every copy
//   launch=0us       fixed cost of every kernel
//   scale=1          wall seconds per modelled second (10: run 10x slower
//                    than the modelled device, so slow host work keeps up)
//   guard=on|off     keep device memory inaccessible to host code (default:
//                    on in debug builds, off with NDEBUG)
//   ops=-a,-b        every op but a and b; ops=a,b: only a and b
//   fail_alloc=k, fail_copy=k, fail_kernel=k: see SimFaults
//
// Sizes take B, KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB; rates the
// same with "/s"; durations ns/us/ms/s. Items after "ops=" without an '='
// continue the op list.
#ifndef FERRY_BACKENDS_SIM_SIM_CONFIG_H_
#define FERRY_BACKENDS_SIM_SIM_CONFIG_H_

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/graph/op.h"

namespace ferry {

// Failures to inject, counted from when they are armed (SimDevice::SetFaults)
// in the order the host issues the operations: k > 0 fails the k-th device
// allocation, copy (any engine, sync or async) or computing node, once;
// 0 injects nothing. An injected allocation failure is returned by Allocate
// as ResourceExhausted; a failed copy or kernel fails its stream with
// Internal ("injected fault"), reported by the next wait or Synchronize,
// after which the device works normally.
struct SimFaults {
  int64_t alloc = 0;
  int64_t copy = 0;
  int64_t kernel = 0;
};

// Thread-compatible (a value type).
struct SimConfig {
  uint64_t mem_bytes = uint64_t{8} << 30;
  uint64_t max_alloc_bytes = 0;  // 0: mem_bytes.
  double flops = 20e12;          // FLOP/s.
  double mem_bw = 1e12;          // Bytes/s.
  double h2d_bw = 25e9;
  double d2h_bw = 25e9;
  double d2d_bw = 50e9;
  double pageable_bw = 0;  // 0: half of the pinned direction's bandwidth.
  int64_t latency_ns = 10000;
  int64_t launch_ns = 0;
  double time_scale = 1.0;
  enum class Guard : uint8_t { kDefault, kOn, kOff };
  Guard guard = Guard::kDefault;
  std::bitset<kNumOps> ops = std::bitset<kNumOps>().set();
  SimFaults faults;

  uint64_t max_alloc() const {
    return max_alloc_bytes == 0 ? mem_bytes : max_alloc_bytes;
  }
  double pageable_h2d_bw() const {
    return pageable_bw > 0 ? pageable_bw : h2d_bw / 2;
  }
  double pageable_d2h_bw() const {
    return pageable_bw > 0 ? pageable_bw : d2h_bw / 2;
  }
  // True when device memory is guarded in this build and configuration.
  bool guarded() const;
  bool SupportsOp(Op op) const {
    return op == Op::kNone || ops.test(static_cast<size_t>(op));
  }

  // Returns the config as a string ParseSimConfig accepts (every key).
  std::string ToString() const;
};

// Parses `text` ("mem=1GiB,h2d=12GB/s", optionally prefixed with "sim:";
// empty gives the defaults). Returns InvalidArgument naming the bad item
// and what was expected, e.g.
//   sim config 'flops=abc': expected a number with an optional k/M/G/T suffix
absl::StatusOr<SimConfig> ParseSimConfig(absl::string_view text);

}  // namespace ferry

#endif  // FERRY_BACKENDS_SIM_SIM_CONFIG_H_
