#include "ferry/runtime/io_reactor.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <coroutine>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

std::string Where(const File& file, int64_t offset) {
  return absl::StrCat("'", file.path(), "' at offset ", offset);
}

absl::Status Validate(const File& file, const void* data, size_t length,
                      int64_t offset, absl::string_view verb) {
  if (file.fd() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " of ", Where(file, offset), ": file is not open"));
  }
  if (offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(verb, " of ", Where(file, offset), ": negative offset"));
  }
  if (file.direct()) {
    const auto aligned = [](uint64_t v) { return v % kDirectIoAlignment == 0; };
    if (!aligned(reinterpret_cast<uintptr_t>(data)) || !aligned(length) ||
        !aligned(static_cast<uint64_t>(offset))) {
      return absl::InvalidArgumentError(
          absl::StrCat(verb, " of ", length, " bytes of ", Where(file, offset),
                       ": O_DIRECT needs buffer, length and offset aligned to ",
                       kDirectIoAlignment));
    }
  }
  return absl::OkStatus();
}

absl::Status EofError(const File& file, int64_t offset, size_t length,
                      size_t done) {
  return absl::OutOfRangeError(
      absl::StrCat("read of ", length, " bytes of ", Where(file, offset),
                   " reached end of file after ", done, " bytes"));
}

absl::Status KernelError(int error_number, const File& file, int64_t offset,
                         size_t length, bool is_read) {
  return ErrnoToStatus(error_number,
                       absl::StrCat(is_read ? "read" : "write", " of ", length,
                                    " bytes of ", Where(file, offset)));
}

// pread/pwrite on the executor's threads.
class PreadReactor final : public IoReactor {
 public:
  explicit PreadReactor(Executor* executor) : executor_(executor) {}
  absl::string_view name() const override { return "pread"; }

 protected:
  Task<absl::StatusOr<size_t>> Transfer(Kind kind, const File& file,
                                        std::byte* data, size_t length,
                                        int64_t offset,
                                        bool stop_at_eof) override {
    co_await executor_->Schedule();
    size_t done = 0;
    while (done < length) {
      const ssize_t n =
          kind == Kind::kRead
              ? ::pread(file.fd(), data + done, length - done, offset + done)
              : ::pwrite(file.fd(), data + done, length - done, offset + done);
      if (n < 0) {
        if (errno == EINTR) continue;
        co_return KernelError(errno, file, offset, length, kind == Kind::kRead);
      }
      if (n == 0) {
        if (kind == Kind::kRead && stop_at_eof) break;
        co_return EofError(file, offset, length, done);
      }
      done += static_cast<size_t>(n);
      // An O_DIRECT read that stops off a block boundary has hit the end of
      // the file; continuing at that offset would fail with EINVAL.
      if (file.direct() && done < length && done % kDirectIoAlignment != 0) {
        if (kind == Kind::kRead && stop_at_eof) break;
        co_return EofError(file, offset, length, done);
      }
    }
    co_return done;
  }

 private:
  Executor* executor_;
};

// See the header: one poller thread owns the ring; an eventfd read kept armed
// on the ring wakes it when callers queue requests.
class UringReactor final : public IoReactor {
 public:
  static absl::StatusOr<std::unique_ptr<UringReactor>> Create(
      Executor* executor, int queue_depth) {
    auto reactor = std::unique_ptr<UringReactor>(new UringReactor(executor));
    const int rc = io_uring_queue_init(queue_depth, &reactor->ring_, 0);
    if (rc < 0) {
      return ErrnoToStatus(-rc, "io_uring_queue_init");
    }
    reactor->ring_ready_ = true;
    reactor->max_in_flight_ = queue_depth;
    reactor->wake_fd_ = eventfd(0, EFD_CLOEXEC);
    if (reactor->wake_fd_ < 0) return ErrnoToStatus(errno, "eventfd");
    reactor->poller_ = std::thread([r = reactor.get()] { r->PollLoop(); });
    return reactor;
  }

  ~UringReactor() override {
    if (poller_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
      }
      Wake();
      poller_.join();
    }
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (ring_ready_) io_uring_queue_exit(&ring_);
  }

  absl::string_view name() const override { return "io_uring"; }

 protected:
  Task<absl::StatusOr<size_t>> Transfer(Kind kind, const File& file,
                                        std::byte* data, size_t length,
                                        int64_t offset,
                                        bool stop_at_eof) override {
    Request request;
    request.kind = kind;
    request.file = &file;
    request.data = data;
    request.length = length;
    request.offset = offset;
    request.stop_at_eof = stop_at_eof;
    request.resume_on = executor_;
    co_await Submit{this, &request};
    if (!request.status.ok()) co_return request.status;
    co_return request.done;
  }

 private:
  struct Request {
    Kind kind;
    const File* file;
    std::byte* data;
    size_t length;
    int64_t offset;
    bool stop_at_eof;
    Executor* resume_on;
    size_t done = 0;
    absl::Status status;
    std::coroutine_handle<> handle;
  };

  struct Submit {
    UringReactor* reactor;
    Request* request;
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> handle) {
      request->handle = handle;
      return reactor->Enqueue(request);
    }
    void await_resume() const noexcept {}
  };

  explicit UringReactor(Executor* executor) : executor_(executor) {}

  // Returns false (do not suspend) if the request was refused.
  bool Enqueue(Request* request) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      request->status = absl::CancelledError("I/O reactor is shutting down");
      return false;
    }
    // The poller drains `incoming_` after every batch of completions, so a
    // request queued by a coroutine it resumed inline needs no wake-up.
    const bool wake =
        incoming_.empty() && std::this_thread::get_id() != poller_.get_id();
    incoming_.push_back(request);
    // Wake under the lock: once the request is queued, the poller may finish
    // it and its owner destroy the reactor (closing wake_fd_) before an
    // unlocked write here would run. The destructor takes mu_ first.
    if (wake) Wake();
    return true;
  }

  void Wake() {
    const uint64_t one = 1;
    // A failed write means the counter is saturated: a wake is pending anyway.
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }

  void ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    FERRY_CHECK(sqe != nullptr);  // Called only with a free slot.
    io_uring_prep_read(sqe, wake_fd_, &wake_counter_, sizeof(wake_counter_), 0);
    io_uring_sqe_set_data(sqe, nullptr);
    wake_armed_ = true;
  }

  // Queues the rest of `request`; returns false if the ring is full.
  bool Prepare(Request* request) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return false;
    const size_t remaining = request->length - request->done;
    // A single SQE moves at most 2^31 bytes; the rest is a continuation.
    const unsigned chunk =
        static_cast<unsigned>(std::min<size_t>(remaining, 1u << 30));
    if (request->kind == Kind::kRead) {
      io_uring_prep_read(sqe, request->file->fd(),
                         request->data + request->done, chunk,
                         request->offset + request->done);
    } else {
      io_uring_prep_write(sqe, request->file->fd(),
                          request->data + request->done, chunk,
                          request->offset + request->done);
    }
    // Buffered reads that hit the page cache would otherwise be copied
    // inline, one at a time, on the submitting (poller) thread; IOSQE_ASYNC
    // hands them to the kernel's io-wq workers, which copy in parallel.
    if (!request->file->direct()) sqe->flags |= IOSQE_ASYNC;
    io_uring_sqe_set_data(sqe, request);
    ++in_flight_;
    return true;
  }

  void Finish(Request* request, absl::Status status) {
    request->status = std::move(status);
    Executor* executor = request->resume_on;
    std::coroutine_handle<> handle = request->handle;
    if (executor != nullptr) {
      executor->Post(handle);
    } else {
      Resume(handle);
    }
  }

  void HandleCompletion(Request* request, int result) {
    --in_flight_;
    const bool is_read = request->kind == Kind::kRead;
    if (result == -EINTR || result == -EAGAIN) {
      ready_.push_front(request);  // Retry as is.
      return;
    }
    if (result < 0) {
      Finish(request, KernelError(-result, *request->file, request->offset,
                                  request->length, is_read));
      return;
    }
    if (result == 0 && request->done < request->length) {
      if (is_read && request->stop_at_eof) {
        Finish(request, absl::OkStatus());
      } else {
        Finish(request, EofError(*request->file, request->offset,
                                 request->length, request->done));
      }
      return;
    }
    request->done += static_cast<size_t>(result);
    // See PreadReactor: an unaligned O_DIRECT stop is the end of the file.
    if (request->done < request->length && request->file->direct() &&
        request->done % kDirectIoAlignment != 0) {
      Finish(request, is_read && request->stop_at_eof
                          ? absl::OkStatus()
                          : EofError(*request->file, request->offset,
                                     request->length, request->done));
      return;
    }
    if (request->done < request->length) {
      ready_.push_front(request);  // Short transfer: continue the rest.
    } else {
      Finish(request, absl::OkStatus());
    }
  }

  void PollLoop() {
    ArmWake();
    io_uring_submit(&ring_);
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      FERRY_CHECK(rc == 0);
      // Drain every completion that is ready, then submit in one batch.
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        auto* request = static_cast<Request*>(io_uring_cqe_get_data(cqe));
        if (request == nullptr) {
          wake_armed_ = false;
        } else {
          HandleCompletion(request, cqe->res);
        }
      }
      io_uring_cq_advance(&ring_, seen);

      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (Request* r : incoming_) ready_.push_back(r);
        incoming_.clear();
        stopping = stopping_;
      }
      while (!ready_.empty() && in_flight_ < max_in_flight_ - 1) {
        if (!Prepare(ready_.front())) break;
        ready_.pop_front();
      }
      if (stopping && in_flight_ == 0 && ready_.empty()) break;
      if (!wake_armed_) ArmWake();
      io_uring_submit(&ring_);
    }
  }

  Executor* executor_;
  io_uring ring_{};
  bool ring_ready_ = false;
  int wake_fd_ = -1;
  std::thread poller_;

  // Owned by the poller thread.
  uint64_t wake_counter_ = 0;
  bool wake_armed_ = false;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  std::deque<Request*> ready_;

  std::mutex mu_;
  std::vector<Request*> incoming_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoReactor>> IoReactor::Create(
    Executor* executor, IoReactorOptions options) {
  if (options.queue_depth < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("io reactor queue depth ", options.queue_depth,
                     " is below the minimum of 2"));
  }
  if (!options.force_fallback) {
    auto uring = UringReactor::Create(executor, options.queue_depth);
    if (uring.ok()) return std::unique_ptr<IoReactor>(std::move(*uring));
    static std::once_flag said_once;
    std::call_once(said_once, [&] {
      std::fprintf(stderr,
                   "ferry: io_uring unavailable (%s); reading files with "
                   "pread on the thread pool\n",
                   std::string(uring.status().message()).c_str());
    });
  }
  if (executor == nullptr) {
    return absl::InvalidArgumentError(
        "the pread fallback needs an executor to run reads on");
  }
  return std::unique_ptr<IoReactor>(new PreadReactor(executor));
}

Task<absl::Status> IoReactor::Read(const File& file, absl::Span<std::byte> dst,
                                   int64_t offset) {
  FERRY_CO_RETURN_IF_ERROR(
      Validate(file, dst.data(), dst.size(), offset, "read"));
  if (dst.empty()) co_return absl::OkStatus();
  co_return (co_await Transfer(Kind::kRead, file, dst.data(), dst.size(),
                               offset, /*stop_at_eof=*/false))
      .status();
}

Task<absl::StatusOr<size_t>> IoReactor::ReadUpTo(const File& file,
                                                 absl::Span<std::byte> dst,
                                                 int64_t offset) {
  FERRY_CO_RETURN_IF_ERROR(
      Validate(file, dst.data(), dst.size(), offset, "read"));
  if (dst.empty()) co_return size_t{0};
  co_return co_await Transfer(Kind::kRead, file, dst.data(), dst.size(), offset,
                              /*stop_at_eof=*/true);
}

Task<absl::Status> IoReactor::Write(const File& file,
                                    absl::Span<const std::byte> src,
                                    int64_t offset) {
  FERRY_CO_RETURN_IF_ERROR(
      Validate(file, src.data(), src.size(), offset, "write"));
  if (src.empty()) co_return absl::OkStatus();
  co_return (co_await Transfer(Kind::kWrite, file,
                               const_cast<std::byte*>(src.data()), src.size(),
                               offset, /*stop_at_eof=*/false))
      .status();
}

}  // namespace ferry
