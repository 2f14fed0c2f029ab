// ProgressBar: a line on stderr that counts a run's tokens, drawn only on a
// terminal and only once the run has lasted a while (short runs and logs
// stay clean).
#ifndef FERRY_EXAMPLES_PROGRESS_BAR_H_
#define FERRY_EXAMPLES_PROGRESS_BAR_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace ferry::examples {

struct ProgressBarOptions {
  std::FILE* out = stderr;
  // Draws only when `out` is a terminal.
  bool only_on_terminal = true;
  // Draws nothing before the run has lasted this long.
  std::chrono::milliseconds delay{2000};
  std::chrono::milliseconds period{200};
};

// Redraws from a thread of its own until destroyed, which erases the line
// if one was drawn. Thread-safe: Add may be called from any thread.
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total,
              ProgressBarOptions options = {});
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void Add(int64_t n) { done_.fetch_add(n, std::memory_order_relaxed); }

  // "\r  LABEL [####......] DONE/TOTAL tokens" with a bar `width` wide;
  // `done` is clamped to [0, total].
  static std::string Line(const std::string& label, int64_t done, int64_t total,
                          int width = 30);

 private:
  void Loop();

  const std::string label_;
  const int64_t total_;
  const ProgressBarOptions options_;
  std::atomic<int64_t> done_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // Guarded by mu_.
  bool drawn_ = false;  // Written by the thread, read after its join.
  std::thread thread_;
};

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_PROGRESS_BAR_H_
