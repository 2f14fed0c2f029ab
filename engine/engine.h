// Engine: batch inference on a llama model placed across backends, with
// continuous batching and pipelined micro-batches.
//
// Requests are submitted from any thread (Submit) or coroutine (Generate);
// each returns its Result when done and may stream tokens. One engine thread
// runs the batching loop:
//   - admits waiting requests while KV slots are free (continuous batching:
//     new requests join while others run; with static_batching, only when
//     none is active, the baseline it is measured against);
//   - forms micro-batches of one fixed shape (llama_batch.h) from every
//     active sequence that is not already in flight: prefill chunks and
//     decode tokens together, padded, and keeps n_copies micro-batches in
//     flight across the pipeline stages. A sequence is in at most one
//     micro-batch in flight (its next token depends on the last one), so
//     with n_copies in flight the sequences rotate through them;
//   - attends by ranges where the model and its devices allow it
//     (attend_by_ranges): each token reads only its own sequence's cache
//     cells, in place, so a micro-batch's attention costs what its
//     sequences' contexts cost and every active sequence may join it;
//     otherwise over a gathered, masked window;
//   - runs each micro-batch on the smallest bucket that holds it: graphs
//     that differ only in how many token slots, logits rows and (on the
//     window path) cache cells they have (powers of two up to batch_tokens,
//     up to the outputs, and window buckets: powers of two from
//     min_window_bucket up to 3/4 of the full window, then the full
//     window), narrowing the batch to it (LlamaBatchBuilder::Narrow). So a
//     micro-batch costs what its live tokens cost, at most twice: a decode
//     step of n sequences computes about n token slots, not batch_tokens,
//     and a short context does not gather, transpose and soft_max the whole
//     window in every layer. Each
//     bucket has its own scheduler (a scheduler keeps one plan and a new one
//     drains its pipeline), so micro-batches of different buckets are in
//     flight together. A bucket is planned when a micro-batch first needs
//     it (the full shape's at Create), after the micro-batches in flight
//     finish, and kept: a plan costs ~2 ms for SmolLM2-135M, and a bucket
//     holds its own compute and copy buffers (smollm2_benchmark's
//     BM_SmolLm2CreateEngine). Host weights that op offload registers with
//     a device are pinned by the first bucket's scheduler; the others'
//     registrations borrow those pages (CudaDevice::BufferFromHostPointer);
//   - when the oldest micro-batch completes, samples each sequence's next
//     token, streams it, finishes sequences (stop token, max_new_tokens, a
//     full slot) and frees their slots.
// The KV cache holds max_sequences slots of max_sequence_len cells per
// layer on that layer's device (llama_kv_cache.h), plus padding's cell.
// Cancelling a request frees its slot (at once, or when its micro-batch
// in flight completes).
#ifndef FERRY_ENGINE_ENGINE_H_
#define FERRY_ENGINE_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/backends/event.h"
#include "ferry/engine/request.h"
#include "ferry/engine/sampler.h"
#include "ferry/models/llama/llama_batch.h"
#include "ferry/models/llama/llama_kv_cache.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/promise.h"
#include "ferry/runtime/task.h"
#include "ferry/sched/scheduler.h"

namespace ferry::engine {

// The backends `model`'s layers run on: its pipeline stages.
int PipelineStages(const llama::LlamaModel& model);

struct EngineOptions {
  int max_sequences = 16;          // KV slots: sequences active at once.
  int64_t max_sequence_len = 256;  // Cells per slot: prompt + generated.
  // Most tokens per micro-batch; a micro-batch runs on the smallest token
  // bucket (a power of two, or batch_tokens) that holds its tokens.
  int64_t batch_tokens = 32;
  // Cache cells one micro-batch may span; 0: every slot by ranges, else
  // enough for min(max_sequences, batch_tokens) full slots.
  int64_t batch_window = 0;
  // Logits rows per micro-batch; 0: batch_tokens.
  int64_t batch_outputs = 0;
  // Most prompt tokens of one sequence per micro-batch; 0: batch_tokens.
  int64_t prefill_chunk = 0;
  // Micro-batches in flight; 1 where the model's layers are on one backend
  // (a second would only queue behind the first, splitting the sequences).
  int n_copies = 4;
  // Runs each micro-batch on the smallest window bucket that holds it;
  // false: every micro-batch attends over the whole window.
  bool window_buckets = true;
  // Runs each micro-batch on the smallest token and output buckets that
  // hold it; false: every micro-batch has batch_tokens token slots and
  // batch_outputs logits rows (padding computes like a token).
  bool token_buckets = true;
  // The smallest bucket's window (a power of two, >= 2); larger buckets
  // double it while they are at most 3/4 of the full window.
  int64_t min_window_bucket = 64;
  // Each token attends in place over its own sequence's cells
  // (range_attention) where the model and every backend allow it
  // (llama::CanAttendByRanges): a micro-batch then costs what its
  // sequences' contexts cost, so the default window spans every slot and
  // decode steps carry all active sequences. false: a gathered, masked
  // window (window buckets apply).
  bool attend_by_ranges = true;
  // The KV cache's cell type: f32, or f16 (half the memory, llama.cpp's
  // default; attention then multiplies f16 values, summed in f32).
  DType kv_cache_type = DType::kF32;
  bool static_batching = false;
  // Nanoseconds for Result times; default: the steady clock. (Programs on
  // simulated devices pass the modelled clock.)
  std::function<int64_t()> clock;
};

struct EngineStats {
  int64_t micro_batches = 0;
  int64_t prefill_tokens = 0;  // Prompt tokens computed.
  int64_t decode_tokens = 0;   // Generated tokens fed back.
  // Token slots of micro-batches left empty (of the bucket they ran on).
  int64_t padded_tokens = 0;
  // Cache cells attended over (the window's, or by ranges the sequences'
  // own), summed over micro-batches, and micro-batches by their window and
  // by their token slots (bucket).
  int64_t window_cells = 0;
  std::map<int64_t, int64_t> micro_batches_by_window;
  std::map<int64_t, int64_t> micro_batches_by_tokens;
  int64_t max_in_flight = 0;
  int64_t requests_done = 0;
  int64_t requests_failed = 0;  // Cancelled or failed.
};

// A submitted request: its result, and a way to cancel it. Move-only.
class RequestHandle {
 public:
  // Blocks until the result (or the error: Cancelled when cancelled).
  absl::StatusOr<Result> Wait() { return future_.GetBlocking(); }
  // The same, awaited.
  Task<absl::StatusOr<Result>> Get() { return future_.Get(); }
  // Asks the engine to stop the request and free its slot; its result is
  // then Cancelled. Thread-safe; no effect once it finished.
  void Cancel();

 private:
  friend class Engine;
  struct Shared {
    std::atomic<bool> cancelled{false};
    class Engine* engine = nullptr;
  };
  RequestHandle(Future<Result> future, std::shared_ptr<Shared> shared)
      : future_(std::move(future)), shared_(std::move(shared)) {}

  Future<Result> future_;
  std::shared_ptr<Shared> shared_;
};

// Thread-safe. Does not own the model, which must outlive it.
class Engine {
 public:
  // Makes the KV cache, the micro-batch graph of each window bucket with a
  // scheduler over the model's backends, plans the graphs, and starts the
  // batching thread.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const llama::LlamaModel& model, const EngineOptions& options);
  // Finishes the micro-batches in flight, fails the remaining requests with
  // Cancelled, and stops the thread.
  ~Engine();

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues `request`. InvalidArgument (naming the field) for a request that
  // can never run: no prompt, token ids outside the vocabulary, a prompt
  // longer than a slot or the window, bad sampling parameters.
  absl::StatusOr<RequestHandle> Submit(Request request);
  // Submits and awaits the result.
  Task<absl::StatusOr<Result>> Generate(Request request);

  // Blocks until no request is waiting, active or in flight.
  void WaitIdle();

  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  // The full shape (the largest bucket's).
  const llama::LlamaBatchShape& batch_shape() const { return shape_; }
  // Window sizes of the window buckets, ascending; the last is
  // batch_shape().n_window.
  const std::vector<int64_t>& window_sizes() const { return windows_; }
  // Buckets planned so far, in the order they were: the first is
  // batch_shape()'s. Call while no micro-batch is being formed (e.g. after
  // WaitIdle) for a list that is not growing.
  int num_buckets() const;
  llama::LlamaBatchShape bucket_shape(int bucket) const;
  Scheduler& scheduler(int bucket);
  // Waits for every bucket's scheduler (see Scheduler::Synchronize).
  absl::Status Synchronize();
  const llama::LlamaKvCache& kv_cache() const { return *cache_; }
  int64_t NowNanos() const { return options_.clock(); }

 private:
  friend class RequestHandle;
  struct Sequence;
  struct MicroBatch;
  // A graph of one shape with the scheduler that runs it.
  struct Bucket {
    llama::LlamaBatchGraph graph;
    std::unique_ptr<Scheduler> sched;
  };
  // The smallest shape that holds what `b` holds.
  llama::LlamaBatchShape BucketShapeFor(
      const llama::LlamaBatchBuilder& b) const;
  // The bucket of `shape`, planned now if it is new.
  absl::StatusOr<Bucket*> GetBucket(const llama::LlamaBatchShape& shape);
  absl::StatusOr<std::unique_ptr<Bucket>> MakeBucket(
      const llama::LlamaBatchShape& shape);

  Engine(const llama::LlamaModel& model, const EngineOptions& options);
  void Loop();
  void Wake();
  // Moves newly submitted requests in, admits what fits, drops cancelled
  // sequences that are not in flight.
  void Intake();
  // Fills the next micro-batch from sequences not in flight; false if
  // there was nothing to add.
  bool FormMicroBatch(MicroBatch& mb);
  absl::Status SubmitMicroBatch(MicroBatch& mb);
  void CompleteMicroBatch(MicroBatch& mb);
  void Finish(Sequence& seq, absl::Status status);
  void FreeSlot(int slot);

  const llama::LlamaModel& model_;
  EngineOptions options_;
  llama::LlamaBatchShape shape_;
  int64_t slot_len_ = 0;  // Usable positions per sequence.
  std::unique_ptr<llama::LlamaKvCache> cache_;
  std::vector<int64_t> windows_;  // Window bucket sizes, ascending.
  // Written by the engine thread under mu_ (read by the accessors); the
  // buckets never move (schedulers keep their graph's address).
  std::vector<std::unique_ptr<Bucket>> buckets_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> incoming_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool idle_ ABSL_GUARDED_BY(mu_) = true;
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;

  // The loop's own state (engine thread only).
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> active_;
  std::vector<int> free_slots_;
  std::deque<std::unique_ptr<MicroBatch>> in_flight_;
  std::vector<std::unique_ptr<MicroBatch>> spare_;
  size_t next_seq_ = 0;  // Round-robin start among active sequences.

  std::thread thread_;
};

}  // namespace ferry::engine

#endif  // FERRY_ENGINE_ENGINE_H_
