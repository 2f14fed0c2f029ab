#include "ferry/backends/cuda/kernels/testing/block_emulation.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define FERRY_FIBER_TSAN 1
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}
#endif

#if defined(__SANITIZE_ADDRESS__)
#define FERRY_FIBER_ASAN 1
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom,
                                    size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save,
                                     const void** bottom_old, size_t* size_old);
void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
}
#endif

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack
// pointer in *from and continues on the stack `to` (as left by this very
// function, or prepared by Fiber::Prepare).
extern "C" void ferry_fiber_switch(void** from, void* to);
asm(R"(
  .pushsection .text
  .p2align 4
  .globl ferry_fiber_switch
  .hidden ferry_fiber_switch
  .type ferry_fiber_switch, @function
ferry_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ferry_fiber_switch, .-ferry_fiber_switch
  .popsection
)");
#endif

namespace ferry::cuda_kernels_testing {

using ::ferry::cuda_kernels_internal::GridPosition;

// How the emulation works. A block's threads are fibers on the calling host
// thread (the fake stream's worker), run round-robin: each runs until it
// reaches a barrier (a warp shuffle meets its warp, __syncthreads its
// block) or its end, and a barrier lets its fibers go once all have
// arrived. Switching fibers does not order memory for ThreadSanitizer
// (each fiber is a thread to it); only barriers do, so a missing barrier
// shows as the data race it would be on a GPU. (The scheduler's setup of a
// block is ordered before the block's fibers, and they before its
// teardown, through two sync tokens; its bookkeeping is atomic.) When no
// fiber can go on and some wait at a barrier, the block's threads
// diverged: the barriers break (every wait returns) so the fibers run to
// their end, and the launch fails.
namespace {

enum class FiberState : int { kReady, kWaiting, kDone };

#if defined(FERRY_FIBER_TSAN) || defined(FERRY_FIBER_ASAN)
constexpr size_t kStackBytes = size_t{1} << 20;
#else
constexpr size_t kStackBytes = size_t{128} << 10;
#endif

class Scheduler;
class Barrier;

struct Fiber {
  int64_t tid = 0;
  std::atomic<int> state{static_cast<int>(FiberState::kDone)};
  std::atomic<const Barrier*> waiting_on{nullptr};
  char* stack = nullptr;  // kStackBytes, mmap'ed.
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t context;
#endif
#if defined(FERRY_FIBER_TSAN)
  void* tsan = nullptr;
#endif
};

// Fiber bookkeeping is in atomics: fibers and the scheduler share it, and
// to ThreadSanitizer they are different threads that switches do not
// order.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  // Called by the running fiber; returns false if the barrier broke.
  bool Wait(Scheduler& scheduler, Fiber& self);
  // Lets every fiber waiting here go, and every later wait return at once.
  void Break(std::vector<std::unique_ptr<Fiber>>& fibers);
  void Reset() {
    arrived_.store(0, std::memory_order_relaxed);
    broken_.store(false, std::memory_order_relaxed);
  }

 private:
  const int count_;
  std::atomic<int> arrived_{0};
  std::atomic<bool> broken_{false};
};

// Runs the fibers of one block after another block, on one host thread.
class Scheduler {
 public:
  // Made on the host thread it runs on (thread_local), before any fiber.
  Scheduler() {
#if defined(FERRY_FIBER_TSAN)
    scheduler_tsan_ = __tsan_get_current_fiber();
#endif
  }
  ~Scheduler() {
    for (auto& fiber : fibers_) {
#if defined(FERRY_FIBER_ASAN)
      // The shadow still marks the last frames' redzones: memory mapped
      // here later (the fake's device memory) would read as a stack.
      __asan_unpoison_memory_region(fiber->stack, kStackBytes);
#endif
      munmap(fiber->stack, kStackBytes);
#if defined(FERRY_FIBER_TSAN)
      if (fiber->tsan != nullptr) __tsan_destroy_fiber(fiber->tsan);
#endif
    }
  }

  absl::Status Run(int64_t blocks, int threads, ThreadBody body);

  // The running fiber goes back to the scheduler.
  void Yield(Fiber& self);
  std::vector<std::unique_ptr<Fiber>>& fibers() { return fibers_; }

  // The state the fibers of the running block share.
  struct Block {
    explicit Block(int threads) : block_barrier(threads), lanes(threads) {
      for (int w = 0; w < (threads + 31) / 32; ++w) {
        warp_barriers.push_back(std::make_unique<Barrier>(32));
      }
    }
    Barrier block_barrier;
    std::vector<std::unique_ptr<Barrier>> warp_barriers;
    std::vector<float> lanes;  // Shuffle slots.
    float shared[32] = {};
    std::atomic<bool> diverged{false};
  };
  Block& block() { return *block_; }
  Fiber& current() { return *current_.load(std::memory_order_relaxed); }

 private:
  static void Entry();
  void Prepare(Fiber& fiber);
  void SwitchTo(Fiber& fiber);
  // Runs every fiber until all are done; false if they diverged.
  bool RunBlock(int threads);

  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::atomic<Fiber*> current_{nullptr};
  // Sync tokens: setup of a block before its fibers, fibers before its end.
  char block_started_ = 0;
  char block_ended_ = 0;
  Block* block_ = nullptr;
  ThreadBody* body_ = nullptr;
  GridPosition position_;
#if defined(__x86_64__)
  void* scheduler_sp_ = nullptr;
#else
  ucontext_t scheduler_context_;
#endif
#if defined(FERRY_FIBER_TSAN)
  void* scheduler_tsan_ = nullptr;
#endif
#if defined(FERRY_FIBER_ASAN)
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
#endif
};

// Atomic: fibers read it, and to TSan they are other threads.
thread_local std::atomic<Scheduler*> running_scheduler{nullptr};

bool Barrier::Wait(Scheduler& scheduler, Fiber& self) {
  if (broken_.load(std::memory_order_relaxed)) return false;
#if defined(FERRY_FIBER_TSAN)
  __tsan_release(this);
#endif
  if (arrived_.fetch_add(1, std::memory_order_relaxed) + 1 == count_) {
    // The last one: everyone waiting here goes on.
    arrived_.store(0, std::memory_order_relaxed);
    for (auto& fiber : scheduler.fibers()) {
      if (fiber->waiting_on.load(std::memory_order_relaxed) == this) {
        fiber->waiting_on.store(nullptr, std::memory_order_relaxed);
        fiber->state.store(static_cast<int>(FiberState::kReady),
                           std::memory_order_relaxed);
      }
    }
  } else {
    self.waiting_on.store(this, std::memory_order_relaxed);
    self.state.store(static_cast<int>(FiberState::kWaiting),
                     std::memory_order_relaxed);
    scheduler.Yield(self);
  }
#if defined(FERRY_FIBER_TSAN)
  __tsan_acquire(this);
#endif
  return !broken_.load(std::memory_order_relaxed);
}

void Barrier::Break(std::vector<std::unique_ptr<Fiber>>& fibers) {
  broken_.store(true, std::memory_order_relaxed);
  for (auto& fiber : fibers) {
    if (fiber->waiting_on.load(std::memory_order_relaxed) == this) {
      fiber->waiting_on.store(nullptr, std::memory_order_relaxed);
      fiber->state.store(static_cast<int>(FiberState::kReady),
                         std::memory_order_relaxed);
    }
  }
}

void Scheduler::Entry() {
  Scheduler& scheduler = *running_scheduler.load(std::memory_order_relaxed);
#if defined(FERRY_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &scheduler.scheduler_stack_bottom_,
                                  &scheduler.scheduler_stack_size_);
#endif
#if defined(FERRY_FIBER_TSAN)
  __tsan_acquire(&scheduler.block_started_);
#endif
  Fiber& self = scheduler.current();
  GridPosition at = scheduler.position_;
  at.thread = self.tid;
  HostSync sync(reinterpret_cast<EmulatedBlock*>(&scheduler), self.tid);
  (*scheduler.body_)(at, sync, scheduler.block_->shared);
  self.state.store(static_cast<int>(FiberState::kDone),
                   std::memory_order_relaxed);
#if defined(FERRY_FIBER_TSAN)
  __tsan_release(&scheduler.block_ended_);
#endif
  scheduler.Yield(self);
  std::abort();  // A finished fiber is never resumed.
}

void Scheduler::Prepare(Fiber& fiber) {
#if defined(FERRY_FIBER_ASAN)
  // The stack's shadow still describes its last fiber's frames.
  __asan_unpoison_memory_region(fiber.stack, kStackBytes);
#endif
  fiber.state.store(static_cast<int>(FiberState::kReady),
                    std::memory_order_relaxed);
  fiber.waiting_on.store(nullptr, std::memory_order_relaxed);
#if defined(__x86_64__)
  // A frame for ferry_fiber_switch to "return" into Entry: six saved
  // registers, then Entry's address, 16-byte aligned as after a call.
  auto* top = reinterpret_cast<void**>(
      (reinterpret_cast<uintptr_t>(fiber.stack) + kStackBytes) &
      ~uintptr_t{15});
  top[-1] = nullptr;  // Entry never returns.
  top[-2] = reinterpret_cast<void*>(&Scheduler::Entry);
  for (int i = 3; i <= 8; ++i) top[-i] = nullptr;
  fiber.sp = &top[-8];
#else
  getcontext(&fiber.context);
  fiber.context.uc_stack.ss_sp = fiber.stack;
  fiber.context.uc_stack.ss_size = kStackBytes;
  fiber.context.uc_link = nullptr;
  makecontext(&fiber.context, &Scheduler::Entry, 0);
#endif
}

void Scheduler::SwitchTo(Fiber& fiber) {
  current_.store(&fiber, std::memory_order_relaxed);
  // Read before the switch: TSan counts what follows it as the fiber's.
#if defined(__x86_64__)
  void* const fiber_sp = fiber.sp;
#endif
#if defined(FERRY_FIBER_TSAN)
  __tsan_switch_to_fiber(fiber.tsan, /*__tsan_switch_to_fiber_no_sync=*/1);
#endif
#if defined(FERRY_FIBER_ASAN)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, fiber.stack, kStackBytes);
#endif
#if defined(__x86_64__)
  ferry_fiber_switch(&scheduler_sp_, fiber_sp);
#else
  swapcontext(&scheduler_context_, &fiber.context);
#endif
#if defined(FERRY_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  current_.store(nullptr, std::memory_order_relaxed);
}

void Scheduler::Yield(Fiber& self) {
#if defined(__x86_64__)
  void* const scheduler_sp = scheduler_sp_;
#endif
#if defined(FERRY_FIBER_ASAN)
  // A finished fiber's fake stack goes (nullptr: it is not coming back).
  const bool done = self.state.load(std::memory_order_relaxed) ==
                    static_cast<int>(FiberState::kDone);
#endif
#if defined(FERRY_FIBER_TSAN)
  __tsan_switch_to_fiber(scheduler_tsan_, 1);
#endif
#if defined(FERRY_FIBER_ASAN)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(done ? nullptr : &fake_stack,
                                 scheduler_stack_bottom_,
                                 scheduler_stack_size_);
#endif
#if defined(__x86_64__)
  ferry_fiber_switch(&self.sp, scheduler_sp);
#else
  swapcontext(&self.context, &scheduler_context_);
#endif
#if defined(FERRY_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, &scheduler_stack_bottom_,
                                  &scheduler_stack_size_);
#endif
}

bool Scheduler::RunBlock(int threads) {
  for (int t = 0; t < threads; ++t) Prepare(*fibers_[t]);
#if defined(FERRY_FIBER_TSAN)
  __tsan_release(&block_started_);
#endif
  bool diverged = false;
  while (true) {
    bool ran = false;
    bool waiting = false;
    for (int t = 0; t < threads; ++t) {
      Fiber& fiber = *fibers_[t];
      const auto state =
          static_cast<FiberState>(fiber.state.load(std::memory_order_relaxed));
      if (state == FiberState::kReady) {
        SwitchTo(fiber);
        ran = true;
      } else if (state == FiberState::kWaiting) {
        waiting = true;
      }
    }
    if (ran) continue;
    if (!waiting) break;  // All done.
    // Nobody can go on: the threads diverged at a barrier.
    diverged = true;
    block_->block_barrier.Break(fibers_);
    for (auto& warp : block_->warp_barriers) warp->Break(fibers_);
  }
#if defined(FERRY_FIBER_TSAN)
  __tsan_acquire(&block_ended_);
#endif
  return !diverged;
}

absl::Status Scheduler::Run(int64_t blocks, int threads, ThreadBody body) {
  while (static_cast<int>(fibers_.size()) < threads) {
    auto fiber = std::make_unique<Fiber>();
    void* stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stack == MAP_FAILED) {
      return absl::ResourceExhaustedError("block emulation: no fiber stack");
    }
    fiber->stack = static_cast<char*>(stack);
    fiber->tid = static_cast<int64_t>(fibers_.size());
#if defined(FERRY_FIBER_TSAN)
    fiber->tsan = __tsan_create_fiber(0);
#endif
    fibers_.push_back(std::move(fiber));
  }
  Scheduler* const outer = running_scheduler.load(std::memory_order_relaxed);
  running_scheduler.store(this, std::memory_order_relaxed);
  body_ = &body;
  bool diverged = false;
  for (int64_t b = 0; b < blocks && !diverged; ++b) {
    Block block(threads);
    block_ = &block;
    position_ = GridPosition{b, blocks, 0, threads};
    diverged = !RunBlock(threads) || block.diverged.load();
  }
  block_ = nullptr;
  body_ = nullptr;
  running_scheduler.store(outer, std::memory_order_relaxed);
  if (diverged) {
    return absl::InternalError(absl::StrCat(
        "the threads of a block (", threads,
        " per block) did not all reach a barrier or a warp shuffle "
        "together: on a GPU this kernel would hang or misbehave"));
  }
  return absl::OkStatus();
}

}  // namespace

// HostSync's handle: the running scheduler (an EmulatedBlock is never made;
// the name keeps the header free of the scheduler's details).
class EmulatedBlock {
 public:
  static Scheduler& Of(EmulatedBlock* block) {
    return *reinterpret_cast<Scheduler*>(block);
  }
};

float HostSync::ShflXor(float v, int lane_mask) {
  // Each lane publishes its value, the warp meets, each lane reads its
  // partner's, and the warp meets again before the slots are reused.
  Scheduler& scheduler = EmulatedBlock::Of(block_);
  Scheduler::Block& block = scheduler.block();
  Fiber& self = scheduler.current();
  Barrier& warp = *block.warp_barriers[tid_ / 32];
  block.lanes[tid_] = v;
  if (!warp.Wait(scheduler, self)) block.diverged.store(true);
  const int64_t partner = (tid_ & ~int64_t{31}) | ((tid_ & 31) ^ lane_mask);
  const float other = block.lanes[partner];
  if (!warp.Wait(scheduler, self)) block.diverged.store(true);
  return other;
}

void HostSync::SyncThreads() {
  Scheduler& scheduler = EmulatedBlock::Of(block_);
  if (!scheduler.block().block_barrier.Wait(scheduler, scheduler.current())) {
    scheduler.block().diverged.store(true);
  }
}

absl::Status RunBlocks(int64_t blocks, int threads, ThreadBody body) {
  if (threads <= 0 || threads > 1024 || threads % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block emulation: ", threads,
                     " threads per block (want a multiple of 32 up to 1024)"));
  }
  if (blocks <= 0) return absl::OkStatus();
  // One scheduler (and its fiber stacks) per host thread, kept.
  thread_local Scheduler scheduler;
  return scheduler.Run(blocks, threads, body);
}

}  // namespace ferry::cuda_kernels_testing
