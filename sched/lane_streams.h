// LaneStreams: the streams a plan's lanes run on (partition.h).
//
// A lane computes on its backend when it is the backend's first lane, and
// on another stream of the device for a later one (the CPU computing the
// head after computing the embedding), so that batch k + 1's first stage
// does not queue behind batch k's last stage on one in-order stream. Copies
// into a lane run on a copy stream of their own: batch k + 1's copies then
// wait only for their producers, not for the lane's compute of batch k, and
// producers wait only for the copies. Streams are made with
// Device::CreateBackend and kept across plans, by (backend, lane index).
//
// Each lane's activations get a buffer type index of their own, except a
// backend's first lane, which shares its backend's type (backends of one
// buffer type share compute buffers, as in ggml): lanes never share memory,
// since they run concurrently.
#ifndef FERRY_SCHED_LANE_STREAMS_H_
#define FERRY_SCHED_LANE_STREAMS_H_

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/sched/partition.h"

namespace ferry {

// Thread-compatible.
class LaneStreams {
 public:
  // Streams and buffer types for `partition`'s lanes over `backends` (in
  // the scheduler's order; `buffer_types` is each backend's activation
  // type; `cpu` the CPU's index). Unavailable if a device cannot make the
  // stream a later lane needs.
  absl::Status Make(const Partition& partition,
                    const std::vector<Backend*>& backends,
                    const std::vector<BufferType*>& buffer_types, int cpu);

  Backend& compute(int lane) const { return *lanes_[lane].compute; }
  // The stream copies into `lane` run on, or null (none needed, or the
  // device could not make one: the copies then queue on compute(lane)).
  Backend* copy(int lane) const { return lanes_[lane].copy; }
  int type(int lane) const { return lanes_[lane].type; }
  int backend_type(int backend) const { return backend_type_[backend]; }
  // Buffer types of every index, for the graph allocator.
  const std::vector<BufferType*>& types() const { return types_; }
  int size() const { return static_cast<int>(lanes_.size()); }
  // The backend `lane` runs for.
  int backend(int lane) const { return lanes_[lane].backend; }

  // Synchronizes every stream this made (not the backends themselves);
  // returns the first failure.
  absl::Status Synchronize();

 private:
  struct Streams {
    Backend* compute = nullptr;
    Backend* copy = nullptr;
    int type = 0;
    int backend = -1;
  };
  using Pool = std::map<std::pair<int, int>, std::unique_ptr<Backend>>;

  std::vector<Streams> lanes_;
  std::vector<int> backend_type_;
  std::vector<BufferType*> types_;
  Pool compute_streams_;
  Pool copy_streams_;
};

}  // namespace ferry

#endif  // FERRY_SCHED_LANE_STREAMS_H_
