#include "ferry/runtime/trace.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;

TEST(TraceTest, DisabledRecorderKeepsNothing) {
  TraceRecorder recorder;
  const int track = recorder.Track("compute");
  recorder.Record(track, "kernel", 0, 10);
  EXPECT_TRUE(recorder.Spans().empty());
}

TEST(TraceTest, RecordsSpansFromManyThreadsSortedByBegin) {
  TraceRecorder recorder;
  recorder.SetEnabled(true);
  const int h2d = recorder.Track("sim0/h2d");
  const int compute = recorder.Track("sim0/compute");
  EXPECT_EQ(recorder.Track("sim0/h2d"), h2d);
  std::thread a([&] {
    recorder.Record(h2d, "copy", 100, 200, {{"bytes", 4096}});
  });
  std::thread b([&] { recorder.Record(compute, "mul_mat", 50, 300); });
  a.join();
  b.join();
  auto spans = recorder.Spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "mul_mat");
  EXPECT_EQ(spans[1].name, "copy");
  EXPECT_EQ(spans[1].args[0].value, 4096);
  recorder.Clear();
  EXPECT_TRUE(recorder.Spans().empty());
}

TEST(TraceTest, ChromeTraceJsonHasTracksAndEscapedNames) {
  TraceRecorder recorder;
  recorder.SetEnabled(true);
  const int track = recorder.Track("disk");
  recorder.Record(track, "read \"weights\"", 1000, 3000, {{"bytes", 7}});
  const std::string json = recorder.ToChromeTraceJson();
  EXPECT_THAT(json, HasSubstr("\"thread_name\",\"args\":{\"name\":\"disk\"}"));
  EXPECT_THAT(json, HasSubstr("\"name\":\"read \\\"weights\\\"\""));
  EXPECT_THAT(json, HasSubstr("\"dur\":2.000"));
  EXPECT_THAT(json, HasSubstr("\"bytes\":7"));

  const std::string path = ::testing::TempDir() + "/trace.json";
  FERRY_ASSERT_OK(recorder.WriteChromeTrace(path));
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  EXPECT_EQ(contents.str(), json);
  EXPECT_FALSE(recorder.WriteChromeTrace("/nonexistent/dir/t.json").ok());
}

// Each device is a process named after it (its tracks are its threads), so
// Perfetto groups sim0's engines apart from sim1's and from host work.
TEST(TraceTest, ChromeTraceHasAProcessPerDevice) {
  TraceRecorder recorder;
  recorder.SetEnabled(true);
  const int a = recorder.Track("sim0/compute");
  const int b = recorder.Track("sim0/h2d");
  const int c = recorder.Track("sched/enqueue");
  recorder.Record(a, "mul_mat", 0, 10);
  recorder.Record(b, "", 0, 10);
  recorder.Record(c, "split 0", 0, 10);
  const std::string json = recorder.ToChromeTraceJson();
  EXPECT_THAT(json,
              HasSubstr("{\"ph\":\"M\",\"pid\":1,\"name\":"
                        "\"process_name\",\"args\":{\"name\":\"sim0\"}}"));
  EXPECT_THAT(json,
              HasSubstr("{\"ph\":\"M\",\"pid\":2,\"name\":"
                        "\"process_name\",\"args\":{\"name\":\"sched\"}}"));
  EXPECT_THAT(json, HasSubstr("\"pid\":1,\"tid\":1,\"name\":\"thread_name\""));
  EXPECT_THAT(json, HasSubstr("\"ph\":\"X\",\"pid\":2,\"tid\":2,\"name\":"
                              "\"split 0\""));
  // Unnamed spans are named so.
  EXPECT_THAT(json, HasSubstr("\"name\":\"(unnamed)\""));
}

}  // namespace
}  // namespace ferry
