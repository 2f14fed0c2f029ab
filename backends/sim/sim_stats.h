// The engines of a simulated device and what they report.
#ifndef FERRY_BACKENDS_SIM_SIM_STATS_H_
#define FERRY_BACKENDS_SIM_SIM_STATS_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ferry {

// A simulated device runs work on four in-order engines, each its own
// worker: kernels, host-to-device copies, device-to-host copies and copies
// from other devices' memory.
enum class SimEngineKind : uint8_t { kCompute = 0, kH2D, kD2H, kD2D };
inline constexpr int kNumSimEngines = 4;

inline absl::string_view SimEngineKindName(SimEngineKind kind) {
  switch (kind) {
    case SimEngineKind::kCompute:
      return "compute";
    case SimEngineKind::kH2D:
      return "h2d";
    case SimEngineKind::kD2H:
      return "d2h";
    case SimEngineKind::kD2D:
      return "d2d";
  }
  return "?";
}

// What one engine has done since the device was made (or stats reset).
// Times are modelled nanoseconds.
struct SimEngineStats {
  int64_t ops = 0;       // Operations completed (a compute op is one span).
  int64_t spans = 0;     // Kernels and copies completed.
  int64_t bytes = 0;     // Bytes copied, or moved by kernels (OpBytes).
  int64_t flops = 0;     // Kernels' OpFlops.
  int64_t busy_ns = 0;   // Sum of modelled durations.
  int64_t clock_ns = 0;  // Modelled completion of the latest operation.
  // Host time beyond the model: when the real work of an operation took
  // longer (scaled) than its modelled duration, the excess. Non-zero means
  // the host is too slow for the modelled device at this time scale; the
  // modelled times stay exact, but real completion lags them.
  int64_t slip_ns = 0;
  int64_t slipped_ops = 0;
  int64_t failed_ops = 0;  // Operations that failed (e.g. injected faults).
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_SIM_SIM_STATS_H_
