#include "ferry/sched/lane_streams.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ferry {

absl::Status LaneStreams::Make(const Partition& partition,
                               const std::vector<Backend*>& backends,
                               const std::vector<BufferType*>& buffer_types,
                               int cpu) {
  // Copy streams only move bytes: on the CPU, one thread is enough. Why the
  // last stream could not be made (a remote worker gone, ...).
  absl::Status failed;
  auto stream_for = [&](Pool& pool, int b, int index) -> Backend* {
    std::unique_ptr<Backend>& stream = pool[{b, index}];
    if (stream == nullptr) {
      const bool copies = &pool == &copy_streams_;
      absl::StatusOr<std::unique_ptr<Backend>> made =
          backends[b]->device().CreateBackend(
              b == cpu && copies ? absl::string_view("threads=1")
                                 : absl::string_view());
      if (made.ok()) {
        stream = *std::move(made);
      } else {
        failed = made.status();
      }
    }
    return stream.get();
  };
  // Lanes that copies go into (a user input written straight into host
  // memory needs no stream).
  std::vector<bool> copies_into(partition.lanes.size(), false);
  for (const InputCopy& copy : partition.copies) {
    const bool host_write =
        copy.user_input && buffer_types[copy.dst_backend]->is_host();
    if (!host_write) copies_into[copy.dst_lane] = true;
  }
  types_.clear();
  backend_type_.assign(backends.size(), -1);
  for (size_t b = 0; b < backends.size(); ++b) {
    auto it = std::find(types_.begin(), types_.end(), buffer_types[b]);
    backend_type_[b] = static_cast<int>(it - types_.begin());
    if (it == types_.end()) types_.push_back(buffer_types[b]);
  }
  lanes_.assign(partition.lanes.size(), Streams());
  for (size_t l = 0; l < partition.lanes.size(); ++l) {
    const Lane& lane = partition.lanes[l];
    Streams& streams = lanes_[l];
    streams.backend = lane.backend;
    streams.compute = backends[lane.backend];
    streams.type = backend_type_[lane.backend];
    if (lane.index > 0) {
      streams.compute = stream_for(compute_streams_, lane.backend, lane.index);
      if (streams.compute == nullptr) {
        return absl::Status(
            failed.ok() ? absl::StatusCode::kUnavailable : failed.code(),
            absl::StrCat("scheduler: ", backends[lane.backend]->name(),
                         " cannot make a second stream for a later stage",
                         failed.ok() ? "" : ": ", failed.message()));
      }
      streams.type = static_cast<int>(types_.size());
      types_.push_back(buffer_types[lane.backend]);
    }
    streams.copy = copies_into[l]
                       ? stream_for(copy_streams_, lane.backend, lane.index)
                       : nullptr;
  }
  return absl::OkStatus();
}

absl::Status LaneStreams::Synchronize() {
  absl::Status first;
  for (Pool* pool : {&copy_streams_, &compute_streams_}) {
    for (const auto& [key, stream] : *pool) {
      if (stream == nullptr) continue;
      absl::Status status = stream->Synchronize();
      if (first.ok()) first = status;
    }
  }
  return first;
}

}  // namespace ferry
