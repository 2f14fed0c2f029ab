// CopySlots: where a scheduler's per-batch copies live, and whose turn it is.
//
// With n_copies slots, batch k uses slot k % n_copies: its split inputs are
// copied into that slot's copy of each input, so batch k + 1's copies
// overlap batch k's compute (ggml's pipeline parallelism). A slot is
// rewritten only once the batch that last used it is done (slot_free).
//
// Memory, per copy:
//   - the copy itself, in a buffer of the type the scheduler chose for its
//     destination (a device's memory, or, on the CPU, pinned host memory of
//     a device so that device -> CPU copies are asynchronous);
//   - for graph inputs bound for device memory, host staging (pinned where
//     a device offers it) that Submit fills from the captured bytes, so the
//     upload itself is asynchronous;
//   - per slot, output staging for outputs downloaded from devices.
// Buffers are chunked as compute buffers are (each at most the type's
// max_size); a failed allocation names the buffer (copies, staging,
// outputs), the backend, the slots and the bytes asked.
//
// Turns: every batch takes a ticket; ticket t enqueues once the turn
// reaches t, then passes it on, so batches enqueue in ticket order and no
// two share a slot's copies.
#ifndef FERRY_SCHED_COPY_SLOTS_H_
#define FERRY_SCHED_COPY_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/event.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry {

// Thread-compatible, except TakeTicket/turns(), which are thread-safe.
class CopySlots {
 public:
  // One copy of a plan: `source`'s layout, in memory of `type`, with host
  // staging of `staging_type` when it is non-null.
  struct Spec {
    const Tensor* source = nullptr;
    BufferType* type = nullptr;
    BufferType* staging_type = nullptr;
    std::string backend;  // For errors: the destination backend's name.
  };

  explicit CopySlots(int n_copies);
  CopySlots(const CopySlots&) = delete;
  CopySlots& operator=(const CopySlots&) = delete;

  int n_copies() const { return n_copies_; }

  // Lays out and places every copy of `specs` (and staging) for all slots,
  // reusing the buffers when they are large enough. `before_replacing` is
  // called once before a buffer that batches in flight may use is freed.
  // On failure nothing is placed and the buffers are released.
  absl::Status Place(absl::Span<const Spec> specs,
                     absl::FunctionRef<absl::Status()> before_replacing);

  Tensor* copy(int index, int slot) {
    return &copies_[static_cast<size_t>(index) * n_copies_ + slot];
  }
  // Host staging of copy `index` in `slot`, or null.
  void* staging(int index, int slot) const {
    return staging_[static_cast<size_t>(index) * n_copies_ + slot];
  }
  // Bytes of copy buffers per buffer type name (for stats).
  size_t copy_bytes(const BufferType* type) const;

  // Host memory of `type` for `bytes` of outputs of `slot`, grown when too
  // small (the slot must be free).
  absl::StatusOr<char*> OutputStaging(int slot, size_t bytes, BufferType* type);

  // Turns. TakeTicket is thread-safe; ticket t uses slot t % n_copies.
  int64_t TakeTicket();
  int SlotOf(int64_t ticket) const {
    return static_cast<int>(ticket % n_copies_);
  }
  // Reaches t when tickets before t have enqueued (or given up).
  TimelineSemaphore& turns() { return turn_; }
  // Lets ticket + 1 enqueue.
  void PassTurn(int64_t ticket) {
    (void)turn_.Signal(static_cast<uint64_t>(ticket) + 1);
  }
  // Completes when the slot's last batch is done with its copies.
  const Event& slot_free(int slot) const { return slot_free_[slot]; }
  void set_slot_free(int slot, Event event) {
    slot_free_[slot] = std::move(event);
  }
  // Forgets the slots' batches (after a synchronize).
  void ResetSlots();

 private:
  struct Chunked {
    BufferType* type = nullptr;
    std::vector<std::unique_ptr<Buffer>> chunks;
    size_t bytes() const;
  };
  // Lays `sizes` (aligned) into chunks of `type`; returns (chunk, offset).
  static std::vector<std::pair<size_t, size_t>> Layout(
      const BufferType& type, absl::Span<const size_t> sizes,
      std::vector<size_t>* chunk_sizes);
  static bool Fits(const Chunked& have, absl::Span<const size_t> need);
  static absl::Status Allocate(Chunked& into, BufferType* type,
                               absl::Span<const size_t> chunk_sizes,
                               absl::string_view what);

  const int n_copies_;
  std::vector<Tensor> copies_;
  std::vector<void*> staging_;
  std::vector<Chunked> copy_buffers_;     // One per buffer type.
  std::vector<Chunked> staging_buffers_;  // One per staging type.
  std::vector<std::unique_ptr<Buffer>> output_staging_;  // Per slot.

  std::mutex ticket_mu_;
  int64_t next_ticket_ = 0;
  TimelineSemaphore turn_{0};
  std::vector<Event> slot_free_;
};

}  // namespace ferry

#endif  // FERRY_SCHED_COPY_SLOTS_H_
