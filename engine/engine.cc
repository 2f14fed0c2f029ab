#include "ferry/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "ferry/runtime/default_executor.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::engine {

struct Engine::Sequence {
  uint64_t id = 0;
  Request request;
  Promise<Result> promise;
  std::shared_ptr<RequestHandle::Shared> shared;
  Result result;
  Sampler sampler;
  std::vector<int32_t> tokens;  // Prompt, then generated.
  int64_t prompt_len = 0;
  int64_t n_fed = 0;       // Tokens whose K/V are in the cache.
  size_t next_logits = 0;  // Into request.logits_positions (sorted).
  int slot = -1;
  std::vector<int32_t> cells;  // Cell of each position.
  bool in_flight = false;
  bool done = false;

  explicit Sequence(Request r)
      : request(std::move(r)), sampler(request.sampling) {}
  bool cancelled() const { return shared->cancelled.load(); }
};

struct Engine::MicroBatch {
  struct Entry {
    Sequence* seq = nullptr;
    int64_t n = 0;                                // Tokens fed.
    std::vector<std::pair<int64_t, int>> wanted;  // (position, logits row)
    int sample_row = -1;
  };
  llama::LlamaBatchBuilder builder;
  std::vector<float> logits;
  std::vector<Entry> entries;
  Event done;

  MicroBatch(const llama::LlamaBatchShape& shape, int32_t pad_cell,
             size_t logits_size)
      : builder(shape, pad_cell), logits(logits_size) {}
};

void RequestHandle::Cancel() {
  if (shared_ == nullptr) return;
  shared_->cancelled.store(true);
  if (shared_->engine != nullptr) shared_->engine->Wake();
}

int PipelineStages(const llama::LlamaModel& model) {
  std::set<int> backends;
  for (const llama::LlamaLayer& layer : model.layers()) {
    backends.insert(layer.backend);
  }
  return static_cast<int>(backends.size());
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const llama::LlamaModel& model, const EngineOptions& options) {
  const llama::LlamaConfig& c = model.config();
  if (model.backends().empty()) {
    return absl::InvalidArgumentError(
        "engine: the model has no backends (use LlamaModel::Create)");
  }
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("engine: ", what));
  };
  if (options.max_sequences < 1 || options.max_sequences > 65536) {
    return bad(absl::StrCat("max_sequences ", options.max_sequences,
                            " must be in [1, 65536]"));
  }
  if (options.max_sequence_len < 1 || options.max_sequence_len > c.n_ctx) {
    return bad(absl::StrCat("max_sequence_len ", options.max_sequence_len,
                            " must be in [1, the model's context ", c.n_ctx,
                            "]"));
  }
  if (options.n_copies < 1 || options.n_copies > 64) {
    return bad(
        absl::StrCat("n_copies ", options.n_copies, " must be in [1, 64]"));
  }
  if (options.prefill_chunk < 0 || options.batch_window < 0 ||
      options.batch_outputs < 0) {
    return bad("prefill_chunk, batch_window and batch_outputs must be >= 0");
  }
  if (options.kv_cache_type != DType::kF32 &&
      options.kv_cache_type != DType::kF16) {
    return bad(absl::StrCat("kv_cache_type ", DTypeName(options.kv_cache_type),
                            " must be f32 or f16"));
  }
  const int64_t min_bucket = options.min_window_bucket;
  if (options.window_buckets &&
      (min_bucket < 2 || min_bucket > (int64_t{1} << 20) ||
       (min_bucket & (min_bucket - 1)) != 0)) {
    return bad(absl::StrCat("min_window_bucket ", min_bucket,
                            " must be a power of two in [2, 2^20]"));
  }
  const int64_t n_cells =
      int64_t{options.max_sequences} * options.max_sequence_len + 1;
  if (n_cells > (int64_t{1} << 24)) {
    return bad(absl::StrCat("max_sequences x max_sequence_len = ", n_cells - 1,
                            " cells; at most 2^24"));
  }
  auto engine = absl::WrapUnique(new Engine(model, options));
  EngineOptions& o = engine->options_;
  if (!o.clock) {
    o.clock = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
  if (o.prefill_chunk == 0) o.prefill_chunk = o.batch_tokens;
  // On one stage a second micro-batch in flight only queues behind the
  // first, and splits the sequences between them (each is in one
  // micro-batch at a time): smaller micro-batches, more of them, for an
  // overlap of nothing but the engine's own sampling.
  if (PipelineStages(model) <= 1) o.n_copies = 1;
  llama::LlamaBatchShape& shape = engine->shape_;
  shape.n_tokens = o.batch_tokens;
  shape.n_outputs = o.batch_outputs > 0 ? o.batch_outputs : o.batch_tokens;
  shape.attend_by_ranges =
      o.attend_by_ranges && llama::CanAttendByRanges(model, o.kv_cache_type);
  // By ranges a window costs nothing: by default it spans every slot.
  const int64_t window_sequences =
      shape.attend_by_ranges
          ? o.max_sequences
          : std::min<int64_t>(o.max_sequences, o.batch_tokens);
  shape.n_window = o.batch_window > 0
                       ? o.batch_window
                       : window_sequences * o.max_sequence_len + 1;
  FERRY_RETURN_IF_ERROR(shape.Validate());
  // A sequence's whole context is in one micro-batch's window.
  engine->slot_len_ = std::min(o.max_sequence_len, shape.n_window - 1);
  FERRY_ASSIGN_OR_RETURN(engine->cache_, llama::LlamaKvCache::Create(
                                             model, n_cells, o.kv_cache_type));
  if (o.window_buckets && !shape.attend_by_ranges) {
    // Powers of two: at most twice the cells a batch needs, and few graphs.
    // One within a quarter of the full window saves too little for a graph
    // (512 beside 513).
    for (int64_t w = o.min_window_bucket; 4 * w <= 3 * shape.n_window; w *= 2) {
      engine->windows_.push_back(w);
    }
  }
  engine->windows_.push_back(shape.n_window);
  // The full shape's bucket now: it checks that the largest batch fits.
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Bucket> full,
                         engine->MakeBucket(shape));
  engine->buckets_.push_back(std::move(full));
  for (int s = o.max_sequences - 1; s >= 0; --s) {
    engine->free_slots_.push_back(s);
  }
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

absl::StatusOr<std::unique_ptr<Engine::Bucket>> Engine::MakeBucket(
    const llama::LlamaBatchShape& shape) {
  auto bucket = std::make_unique<Bucket>();
  FERRY_ASSIGN_OR_RETURN(bucket->graph,
                         llama::BuildLlamaBatchGraph(model_, *cache_, shape));
  FERRY_ASSIGN_OR_RETURN(
      bucket->sched,
      Scheduler::Create(model_.backends(), {.n_copies = options_.n_copies}));
  // Each stage keeps its layers even where two stages are backends of one
  // device (their memory types alike): weights and caches pinned.
  for (const auto& [weight, b] : model_.WeightBackends()) {
    FERRY_RETURN_IF_ERROR(
        bucket->sched->SetTensorBackend(*weight, *model_.backends()[b]));
  }
  for (int il = 0; il < model_.config().n_layer; ++il) {
    Backend& b = *model_.backends()[model_.layers()[il].backend];
    FERRY_RETURN_IF_ERROR(bucket->sched->SetTensorBackend(*cache_->k(il), b));
    FERRY_RETURN_IF_ERROR(bucket->sched->SetTensorBackend(*cache_->v(il), b));
  }
  FERRY_RETURN_IF_ERROR(bucket->sched->AllocGraph(bucket->graph.graph));
  return bucket;
}

llama::LlamaBatchShape Engine::BucketShapeFor(
    const llama::LlamaBatchBuilder& b) const {
  llama::LlamaBatchShape to = shape_;
  if (options_.token_buckets) {
    // Powers of two, capped by the full shape: padding at most doubles the
    // live tokens and outputs.
    auto bucket = [](int64_t used, int64_t cap) {
      int64_t n = 1;
      while (n < used) n *= 2;
      return std::min(n, cap);
    };
    to.n_tokens = bucket(b.tokens_used(), shape_.n_tokens);
    to.n_outputs =
        bucket(b.outputs_used(), std::min(to.n_tokens, shape_.n_outputs));
  }
  // The smallest window that holds the sequences' entries and padding's;
  // the last (the full shape's) holds every batch.
  to.n_window =
      *std::find_if(windows_.begin(), windows_.end() - 1,
                    [&](int64_t w) { return w >= b.window_used() + 1; });
  return to;
}

absl::StatusOr<Engine::Bucket*> Engine::GetBucket(
    const llama::LlamaBatchShape& shape) {
  for (const std::unique_ptr<Bucket>& bucket : buckets_) {
    const llama::LlamaBatchShape& have = bucket->graph.shape;
    if (have.n_tokens == shape.n_tokens && have.n_outputs == shape.n_outputs &&
        have.n_window == shape.n_window) {
      return bucket.get();
    }
  }
  // Planning allocates and may register host memory with devices: not
  // beside micro-batches in flight on them.
  FERRY_RETURN_IF_ERROR(Synchronize());
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Bucket> bucket, MakeBucket(shape));
  std::lock_guard<std::mutex> lock(mu_);
  buckets_.push_back(std::move(bucket));
  return buckets_.back().get();
}

int Engine::num_buckets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(buckets_.size());
}

llama::LlamaBatchShape Engine::bucket_shape(int bucket) const {
  std::lock_guard<std::mutex> lock(mu_);
  return buckets_.at(static_cast<size_t>(bucket))->graph.shape;
}

Scheduler& Engine::scheduler(int bucket) {
  std::lock_guard<std::mutex> lock(mu_);
  return *buckets_.at(static_cast<size_t>(bucket))->sched;
}

Engine::Engine(const llama::LlamaModel& model, const EngineOptions& options)
    : model_(model), options_(options) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;
  }
  cv_.notify_all();
}

absl::StatusOr<RequestHandle> Engine::Submit(Request request) {
  const int64_t n_vocab = model_.config().n_vocab;
  const std::string who = absl::StrCat("request '", request.id, "': ");
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(who, "empty prompt"));
  }
  if (static_cast<int64_t>(request.prompt.size()) > slot_len_) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, "prompt of ", request.prompt.size(),
        " tokens is longer than a sequence may be (", slot_len_,
        ": max_sequence_len, and the micro-batch window less one)"));
  }
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t t = request.prompt[i];
    if (t < 0 || t >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, "token ", t, " at ", i, " outside [0, ", n_vocab, ")"));
    }
  }
  if (request.max_new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, "max_new_tokens ", request.max_new_tokens, " must be >= 1"));
  }
  if (absl::Status s = request.sampling.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(who, s.message()));
  }
  auto& positions = request.logits_positions;
  for (int64_t p : positions) {
    if (p < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, "logits position ", p, " is negative"));
    }
  }
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()),
                  positions.end());

  auto seq = std::make_unique<Sequence>(std::move(request));
  seq->shared = std::make_shared<RequestHandle::Shared>();
  seq->shared->engine = this;
  seq->tokens = seq->request.prompt;
  seq->prompt_len = static_cast<int64_t>(seq->tokens.size());
  seq->result.id = seq->request.id;
  seq->result.submitted_ns = options_.clock();
  RequestHandle handle(seq->promise.GetFuture(), seq->shared);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return absl::FailedPreconditionError("engine: shutting down");
    seq->id = next_id_++;
    idle_ = false;
    incoming_.push_back(std::move(seq));
  }
  cv_.notify_all();
  return handle;
}

Task<absl::StatusOr<Result>> Engine::Generate(Request request) {
  absl::StatusOr<RequestHandle> handle = Submit(std::move(request));
  if (!handle.ok()) co_return handle.status();
  Executor* here = Executor::Current();
  co_return co_await handle->future_.Get(
      {.resume_on = here != nullptr ? here : &DefaultExecutor()});
}

void Engine::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return idle_ && incoming_.empty(); });
}

absl::Status Engine::Synchronize() {
  std::vector<Scheduler*> scheds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& bucket : buckets_) scheds.push_back(bucket->sched.get());
  }
  absl::Status first;
  for (Scheduler* sched : scheds) first.Update(sched->Synchronize());
  return first;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::FreeSlot(int slot) { free_slots_.push_back(slot); }

void Engine::Finish(Sequence& seq, absl::Status status) {
  if (seq.done) return;
  seq.done = true;
  seq.result.finished_ns = options_.clock();
  if (seq.slot >= 0) {
    FreeSlot(seq.slot);
    seq.slot = -1;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++(status.ok() ? stats_.requests_done : stats_.requests_failed);
  }
  if (status.ok()) {
    seq.promise.SetValue(std::move(seq.result));
  } else {
    seq.promise.SetError(std::move(status));
  }
}

void Engine::Intake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!incoming_.empty()) {
      waiting_.push_back(std::move(incoming_.front()));
      incoming_.pop_front();
    }
    wake_ = false;
  }
  const absl::Status cancelled = absl::CancelledError("request cancelled");
  for (auto& seq : waiting_) {
    if (seq->cancelled()) Finish(*seq, cancelled);
  }
  for (auto& seq : active_) {
    if (seq->cancelled() && !seq->in_flight) Finish(*seq, cancelled);
  }
  auto is_done = [](const std::unique_ptr<Sequence>& s) { return s->done; };
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), is_done),
                 waiting_.end());
  active_.erase(std::remove_if(active_.begin(), active_.end(), is_done),
                active_.end());
  if (options_.static_batching && !active_.empty()) return;
  while (!waiting_.empty() && !free_slots_.empty()) {
    std::unique_ptr<Sequence> seq = std::move(waiting_.front());
    waiting_.pop_front();
    seq->slot = free_slots_.back();
    free_slots_.pop_back();
    const int64_t base = int64_t{seq->slot} * options_.max_sequence_len;
    seq->cells.resize(static_cast<size_t>(slot_len_));
    for (int64_t p = 0; p < slot_len_; ++p) {
      seq->cells[static_cast<size_t>(p)] = static_cast<int32_t>(base + p);
    }
    active_.push_back(std::move(seq));
  }
}

bool Engine::FormMicroBatch(MicroBatch& mb) {
  llama::LlamaBatchBuilder& b = mb.builder;
  b.Clear();
  mb.entries.clear();
  const size_t n = active_.size();
  for (size_t k = 0; k < n && b.tokens_left() > 0; ++k) {
    Sequence& seq = *active_[(next_seq_ + k) % n];
    if (seq.in_flight || seq.done || seq.cancelled()) continue;
    const int64_t first = seq.n_fed;
    const auto known = static_cast<int64_t>(seq.tokens.size());
    int64_t count = known - first;
    if (first < seq.prompt_len) count = std::min(count, options_.prefill_chunk);
    count = std::min({count, b.tokens_left(), b.window_left() - first});
    const auto& positions = seq.request.logits_positions;
    std::vector<int> logits_at;
    int sample_index = -1;
    // Shrinks the chunk until its logits rows fit.
    for (; count > 0; --count) {
      logits_at.clear();
      for (size_t i = seq.next_logits;
           i < positions.size() && positions[i] < first + count; ++i) {
        logits_at.push_back(static_cast<int>(positions[i] - first));
      }
      sample_index = -1;
      if (first + count == known) {
        sample_index = static_cast<int>(count - 1);
        if (logits_at.empty() || logits_at.back() != sample_index) {
          logits_at.push_back(sample_index);
        }
      }
      if (static_cast<int64_t>(logits_at.size()) <= b.outputs_left()) break;
    }
    if (count <= 0) continue;
    absl::StatusOr<std::vector<int>> rows = b.Add(
        absl::MakeConstSpan(seq.tokens)
            .subspan(static_cast<size_t>(first), static_cast<size_t>(count)),
        first, seq.cells, logits_at);
    if (!rows.ok()) continue;  // Cannot happen: the sizes were checked.
    MicroBatch::Entry entry;
    entry.seq = &seq;
    entry.n = count;
    for (size_t i = 0; i < logits_at.size(); ++i) {
      if (logits_at[i] == sample_index) entry.sample_row = (*rows)[i];
      const int64_t pos = first + logits_at[i];
      if (seq.next_logits < positions.size() &&
          positions[seq.next_logits] == pos) {
        entry.wanted.emplace_back(pos, (*rows)[i]);
        ++seq.next_logits;
      }
    }
    seq.in_flight = true;
    mb.entries.push_back(std::move(entry));
  }
  if (n > 0) next_seq_ = (next_seq_ + 1) % n;
  return !mb.entries.empty();
}

absl::Status Engine::SubmitMicroBatch(MicroBatch& mb) {
  llama::LlamaBatchBuilder& b = mb.builder;
  const int64_t live_tokens = b.tokens_used();
  FERRY_ASSIGN_OR_RETURN(Bucket * bucket, GetBucket(BucketShapeFor(b)));
  FERRY_RETURN_IF_ERROR(b.Narrow(bucket->graph.shape));
  const llama::LlamaBatchGraph& g = bucket->graph;
  auto bytes = [](const auto& v) { return v.size() * sizeof(v[0]); };
  BatchIo io;
  io.In(*g.tokens, b.tokens().data(), bytes(b.tokens()))
      .In(*g.pos, b.pos().data(), bytes(b.pos()))
      .In(*g.kv_dst, b.kv_dst().data(), bytes(b.kv_dst()))
      .In(*g.out_rows, b.out_rows().data(), bytes(b.out_rows()));
  if (g.kv_ranges != nullptr) {
    io.In(*g.kv_ranges, b.kv_ranges().data(), bytes(b.kv_ranges()));
  } else {
    io.In(*g.kv_window, b.kv_window().data(), bytes(b.kv_window()))
        .In(*g.mask, b.mask().data(), bytes(b.mask()));
  }
  io.Out(*g.logits, mb.logits.data(),
         static_cast<size_t>(g.shape.n_outputs * model_.config().n_vocab) *
             sizeof(float));
  FERRY_ASSIGN_OR_RETURN(mb.done, bucket->sched->Submit(g.graph, io));
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.micro_batches;
  // By ranges only the sequences' own cells are read.
  stats_.window_cells +=
      g.shape.attend_by_ranges ? b.window_used() : g.shape.n_window;
  ++stats_.micro_batches_by_window[g.shape.n_window];
  ++stats_.micro_batches_by_tokens[g.shape.n_tokens];
  stats_.padded_tokens += g.shape.n_tokens - live_tokens;
  for (const MicroBatch::Entry& e : mb.entries) {
    const int64_t prefill =
        std::max<int64_t>(0, std::min(e.seq->prompt_len - e.seq->n_fed, e.n));
    stats_.prefill_tokens += prefill;
    stats_.decode_tokens += e.n - prefill;
  }
  stats_.max_in_flight = std::max<int64_t>(
      stats_.max_in_flight, static_cast<int64_t>(in_flight_.size()) + 1);
  return absl::OkStatus();
}

void Engine::CompleteMicroBatch(MicroBatch& mb) {
  const absl::Status status = mb.done.WaitBlocking();
  const int64_t n_vocab = model_.config().n_vocab;
  const int64_t now = options_.clock();
  for (MicroBatch::Entry& e : mb.entries) {
    Sequence& seq = *e.seq;
    seq.in_flight = false;
    if (!status.ok()) {
      Finish(seq,
             absl::Status(status.code(), absl::StrCat("micro-batch failed: ",
                                                      status.message())));
      continue;
    }
    seq.n_fed += e.n;
    auto row = [&](int r) {
      return absl::MakeConstSpan(mb.logits).subspan(
          static_cast<size_t>(r * n_vocab), static_cast<size_t>(n_vocab));
    };
    for (const auto& [pos, r] : e.wanted) {
      auto values = row(r);
      seq.result.logits.emplace_back(
          pos, std::vector<float>(values.begin(), values.end()));
    }
    if (seq.cancelled()) {
      Finish(seq, absl::CancelledError("request cancelled"));
      continue;
    }
    if (e.sample_row < 0) continue;
    auto values = row(e.sample_row);
    seq.result.non_finite_logits += CountNonFinite(values);
    const int32_t token = seq.sampler.Sample(values);
    seq.tokens.push_back(token);
    Result& r = seq.result;
    if (r.tokens.empty()) r.first_token_ns = now;
    r.tokens.push_back(token);
    r.token_ns.push_back(now);
    if (seq.request.on_token) seq.request.on_token(token);
    const auto& stops = seq.request.stop_tokens;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      r.finish = FinishReason::kStop;
    } else if (static_cast<int>(r.tokens.size()) >=
               seq.request.max_new_tokens) {
      r.finish = FinishReason::kLength;
    } else if (static_cast<int64_t>(seq.tokens.size()) > slot_len_) {
      r.finish = FinishReason::kContext;  // No cell for the next token.
    } else {
      continue;
    }
    Finish(seq, absl::OkStatus());
  }
  active_.erase(std::remove_if(
                    active_.begin(), active_.end(),
                    [](const std::unique_ptr<Sequence>& s) { return s->done; }),
                active_.end());
}

void Engine::Loop() {
  const size_t logits_size =
      static_cast<size_t>(model_.config().n_vocab * shape_.n_outputs);
  const auto pad_cell = static_cast<int32_t>(cache_->n_cells() - 1);
  while (true) {
    Intake();
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stop_;
    }
    if (stopping) break;
    while (static_cast<int>(in_flight_.size()) < options_.n_copies) {
      std::unique_ptr<MicroBatch> mb;
      if (!spare_.empty()) {
        mb = std::move(spare_.back());
        spare_.pop_back();
      } else {
        mb = std::make_unique<MicroBatch>(shape_, pad_cell, logits_size);
      }
      if (!FormMicroBatch(*mb)) {
        spare_.push_back(std::move(mb));
        break;
      }
      if (absl::Status s = SubmitMicroBatch(*mb); !s.ok()) {
        for (MicroBatch::Entry& e : mb->entries) {
          e.seq->in_flight = false;
          Finish(*e.seq, s);
        }
        spare_.push_back(std::move(mb));
        continue;
      }
      in_flight_.push_back(std::move(mb));
    }
    if (!in_flight_.empty()) {
      CompleteMicroBatch(*in_flight_.front());
      spare_.push_back(std::move(in_flight_.front()));
      in_flight_.pop_front();
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (active_.empty() && waiting_.empty() && incoming_.empty()) {
      idle_ = true;
      cv_.notify_all();
    }
    cv_.wait(lock, [&] { return !incoming_.empty() || stop_ || wake_; });
  }
  // Shutting down: let the micro-batches in flight finish, fail the rest.
  while (!in_flight_.empty()) {
    CompleteMicroBatch(*in_flight_.front());
    in_flight_.pop_front();
  }
  const absl::Status shut = absl::CancelledError("engine shut down");
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!incoming_.empty()) {
      waiting_.push_back(std::move(incoming_.front()));
      incoming_.pop_front();
    }
  }
  for (auto& seq : waiting_) Finish(*seq, shut);
  for (auto& seq : active_) Finish(*seq, shut);
  waiting_.clear();
  active_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  idle_ = true;
  cv_.notify_all();
}

}  // namespace ferry::engine
