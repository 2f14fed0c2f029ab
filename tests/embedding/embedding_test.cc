// Uses ferry from another workspace that has a runtime/task.h of its own.
#include <thread>

#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/thread_pool.h"
#include "gtest/gtest.h"
#include "runtime/task.h"

namespace {

ferry::Task<std::thread::id> RunOnPool(ferry::ThreadPool* pool) {
  co_await pool->Schedule();
  co_return std::this_thread::get_id();
}

TEST(EmbeddingTest, FerryAndTheEmbeddersRuntimeCoexist) {
  embedding::Task own{7};
  EXPECT_EQ(embedding::TaskId(own), 7);

  ferry::ThreadPool pool(2);
  EXPECT_NE(ferry::SyncWait(RunOnPool(&pool)), std::this_thread::get_id());
}

}  // namespace
