#include "ferry/runtime/io_reactor.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/file.h"
#include "ferry/runtime/promise.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/runtime/when_all.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kFileSize = 192ll << 20;  // A few hundred MB, O_DIRECT-sized.

// Writes a file of pseudo-random bytes once per test binary.
const std::string& TestFile() {
  static const std::string* const path = [] {
    auto* p = new std::string(::testing::TempDir() + "/io_reactor_test.bin");
    const int fd = ::open(p->c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0);
    std::vector<uint64_t> chunk(1 << 17);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int64_t written = 0; written < kFileSize;) {
      for (uint64_t& word : chunk) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        word = state;
      }
      const size_t bytes = chunk.size() * sizeof(uint64_t);
      EXPECT_EQ(::pwrite(fd, chunk.data(), bytes, written),
                static_cast<ssize_t>(bytes));
      written += bytes;
    }
    ::close(fd);
    return p;
  }();
  return *path;
}

struct Mode {
  bool force_fallback;
  bool direct;
};

class IoReactorTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    auto reactor = IoReactor::Create(
        &pool_, IoReactorOptions{.force_fallback = GetParam().force_fallback});
    ASSERT_THAT(reactor, IsOk());
    reactor_ = std::move(*reactor);
    auto file =
        File::Open(TestFile(), FileOptions{.direct = GetParam().direct});
    if (GetParam().direct && absl::IsInvalidArgument(file.status())) {
      GTEST_SKIP() << "filesystem has no O_DIRECT: " << file.status();
    }
    ASSERT_THAT(file, IsOk());
    file_ = std::make_unique<File>(std::move(*file));
    reference_ = ::open(TestFile().c_str(), O_RDONLY);
    ASSERT_GE(reference_, 0);
  }
  void TearDown() override {
    if (reference_ >= 0) ::close(reference_);
  }

  ThreadPool pool_{2};
  std::unique_ptr<IoReactor> reactor_;
  std::unique_ptr<File> file_;
  int reference_ = -1;
};

Task<absl::Status> ReadAndCompare(IoReactor* reactor, const File* file,
                                  int reference, int64_t offset, size_t size) {
  FERRY_CO_ASSIGN_OR_RETURN(AlignedBuffer buffer, AlignedBuffer::Create(size));
  FERRY_CO_RETURN_IF_ERROR(
      co_await reactor->Read(*file, buffer.span(), offset));
  std::vector<std::byte> expected(size);
  if (::pread(reference, expected.data(), size, offset) !=
      static_cast<ssize_t>(size)) {
    co_return absl::InternalError("reference pread failed");
  }
  if (std::memcmp(expected.data(), buffer.data(), size) != 0) {
    co_return absl::DataLossError(
        absl::StrCat("mismatch at offset ", offset, " size ", size));
  }
  co_return absl::OkStatus();
}

// Random offsets and sizes, 32 reads in flight at a time, byte for byte.
TEST_P(IoReactorTest, RandomReadsMatchPread) {
  std::mt19937_64 rng(42);
  const int64_t align = GetParam().direct ? kDirectIoAlignment : 1;
  for (int batch = 0; batch < 8; ++batch) {
    std::vector<Task<absl::Status>> reads;
    for (int i = 0; i < 32; ++i) {
      size_t size = std::uniform_int_distribution<size_t>(1, 4 << 20)(rng);
      size = (size + align - 1) / align * align;
      int64_t offset = std::uniform_int_distribution<int64_t>(
          0, kFileSize - static_cast<int64_t>(size))(rng);
      offset = offset / align * align;
      reads.push_back(ReadAndCompare(reactor_.get(), file_.get(), reference_,
                                     offset, size));
    }
    ASSERT_THAT(SyncWait(WhenAllOk(std::move(reads))), IsOk());
  }
}

TEST_P(IoReactorTest, WholeFileInLargeReads) {
  std::vector<Task<absl::Status>> reads;
  constexpr size_t kChunk = 16 << 20;
  for (int64_t offset = 0; offset < kFileSize; offset += kChunk) {
    reads.push_back(ReadAndCompare(reactor_.get(), file_.get(), reference_,
                                   offset, kChunk));
  }
  EXPECT_THAT(SyncWait(WhenAllOk(std::move(reads))), IsOk());
}

TEST_P(IoReactorTest, ReadPastEndOfFileNamesFileAndOffset) {
  auto buffer = *AlignedBuffer::Create(2 * kDirectIoAlignment);
  const int64_t offset = kFileSize - kDirectIoAlignment;
  EXPECT_THAT(SyncWait(reactor_->Read(*file_, buffer.span(), offset)),
              StatusIs(absl::StatusCode::kOutOfRange,
                       ::testing::AllOf(HasSubstr("io_reactor_test.bin"),
                                        HasSubstr(absl::StrCat(offset)),
                                        HasSubstr("end of file"))));
  auto n = SyncWait(reactor_->ReadUpTo(*file_, buffer.span(), offset));
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(*n, kDirectIoAlignment);
}

TEST_P(IoReactorTest, NegativeOffsetAndClosedFile) {
  auto buffer = *AlignedBuffer::Create(kDirectIoAlignment);
  EXPECT_THAT(SyncWait(reactor_->Read(*file_, buffer.span(), -4096)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("negative offset")));
  File moved_from = std::move(*file_);
  EXPECT_THAT(
      SyncWait(reactor_->Read(*file_, buffer.span(), 0)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not open")));
}

INSTANTIATE_TEST_SUITE_P(Modes, IoReactorTest,
                         ::testing::Values(Mode{false, false},
                                           Mode{false, true}, Mode{true, false},
                                           Mode{true, true}),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return absl::StrCat(
                               info.param.force_fallback ? "Pread" : "Uring",
                               info.param.direct ? "Direct" : "Buffered");
                         });

TEST(IoReactorErrorsTest, BadFdGivesKernelError) {
  ThreadPool pool(1);
  for (bool fallback : {false, true}) {
    auto reactor =
        *IoReactor::Create(&pool, IoReactorOptions{.force_fallback = fallback});
    // A write-only descriptor cannot be read: EBADF from the kernel.
    const std::string path = ::testing::TempDir() + "/write_only.bin";
    auto file = File::Open(path, FileOptions{.write = true, .create = true});
    ASSERT_THAT(file, IsOk());
    const int write_only = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(write_only, 0);
    ASSERT_GE(::dup2(write_only, file->fd()), 0);
    ::close(write_only);
    std::vector<std::byte> buffer(16);
    EXPECT_THAT(SyncWait(reactor->Read(*file, absl::MakeSpan(buffer), 0)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("write_only.bin")))
        << reactor->name();
  }
}

TEST(IoReactorErrorsTest, DirectIoRejectsUnalignedRequests) {
  ThreadPool pool(1);
  auto reactor = *IoReactor::Create(&pool);
  auto file = File::Open(TestFile(), FileOptions{.direct = true});
  if (!file.ok()) GTEST_SKIP() << file.status();
  std::vector<std::byte> unaligned(100);
  EXPECT_THAT(
      SyncWait(reactor->Read(*file, absl::MakeSpan(unaligned), 0)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("O_DIRECT")));
}

TEST(IoReactorErrorsTest, WriteThenReadBack) {
  ThreadPool pool(1);
  for (bool fallback : {false, true}) {
    auto reactor =
        *IoReactor::Create(&pool, IoReactorOptions{.force_fallback = fallback});
    const std::string path = ::testing::TempDir() + "/roundtrip.bin";
    auto file = *File::Open(
        path, FileOptions{.write = true, .create = true, .truncate = true});
    std::string text = "ferry writes through " + std::string(reactor->name());
    auto bytes = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(text.data()), text.size());
    ASSERT_THAT(SyncWait(reactor->Write(file, bytes, 10)), IsOk());
    std::string back(text.size(), '\0');
    ASSERT_THAT(SyncWait(reactor->Read(
                    file,
                    absl::MakeSpan(reinterpret_cast<std::byte*>(back.data()),
                                   back.size()),
                    10)),
                IsOk());
    EXPECT_EQ(back, text);
  }
}

// The owner may destroy the reactor the moment its last read returns, while
// the pool thread that queued a read is still inside Read's submission (it
// woke the poller after queuing). Many reads from pool threads, destroyed at
// once, many times: TSan saw a write to the closed wake-up eventfd here.
TEST(IoReactorErrorsTest, DestroyedAsSoonAsTheLastReadReturns) {
  ThreadPool pool(2);
  auto file = *File::Open(TestFile());
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < 16; ++i) buffers.push_back(*AlignedBuffer::Create(4096));
  auto read_on_pool = [](ThreadPool* p, IoReactor* r, const File* f,
                         AlignedBuffer* b,
                         int64_t offset) -> Task<absl::Status> {
    co_await p->Schedule();
    co_return co_await r->Read(*f, b->span(), offset);
  };
  for (int round = 0; round < 200; ++round) {
    auto reactor = *IoReactor::Create(&pool);
    std::vector<Task<absl::Status>> reads;
    for (int i = 0; i < 16; ++i) {
      reads.push_back(read_on_pool(&pool, reactor.get(), &file, &buffers[i],
                                   int64_t{(round * 16 + i) % 4096} << 12));
    }
    for (const absl::Status& s : SyncWait(WhenAll(std::move(reads)))) {
      ASSERT_THAT(s, IsOk());
    }
    reactor.reset();
  }
}

TEST(IoReactorErrorsTest, ShutdownWithReadsInFlight) {
  ThreadPool pool(2);
  auto file = *File::Open(TestFile());
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < 64; ++i)
    buffers.push_back(*AlignedBuffer::Create(1 << 20));
  std::atomic<int> finished{0};
  auto reactor = *IoReactor::Create(&pool);
  auto read = [](IoReactor* r, const File* f, AlignedBuffer* b, int64_t offset,
                 std::atomic<int>* done) -> Task<void> {
    absl::Status s = co_await r->Read(*f, b->span(), offset);
    EXPECT_TRUE(s.ok() || absl::IsCancelled(s)) << s;
    done->fetch_add(1);
  };
  for (int i = 0; i < 64; ++i) {
    Detach(
        read(reactor.get(), &file, &buffers[i], int64_t{i} << 20, &finished));
  }
  reactor.reset();  // Waits for the in-flight reads; their waiters resume.
  while (finished.load() < 64) std::this_thread::yield();
}

}  // namespace
}  // namespace ferry
