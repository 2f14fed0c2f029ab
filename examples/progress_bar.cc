#include "ferry/examples/progress_bar.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ferry::examples {

ProgressBar::ProgressBar(std::string label, int64_t total,
                         ProgressBarOptions options)
    : label_(std::move(label)),
      total_(total),
      options_(options),
      thread_([this] { Loop(); }) {}

ProgressBar::~ProgressBar() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (drawn_) {
    std::fprintf(options_.out, "\r%*s\r", 78, "");
    std::fflush(options_.out);
  }
}

std::string ProgressBar::Line(const std::string& label, int64_t done,
                              int64_t total, int width) {
  total = std::max<int64_t>(0, total);
  done = std::clamp<int64_t>(done, 0, total);
  const int fill = static_cast<int>(width * done / std::max<int64_t>(1, total));
  return absl::StrFormat("\r  %-18s [%s%s] %d/%d tokens", label,
                         std::string(fill, '#'), std::string(width - fill, '.'),
                         done, total);
}

void ProgressBar::Loop() {
  if (options_.only_on_terminal && !::isatty(::fileno(options_.out))) return;
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, options_.period, [&] { return stop_; })) {
    if (std::chrono::steady_clock::now() - start < options_.delay) continue;
    const std::string line = Line(label_, done_.load(), total_);
    std::fputs(line.c_str(), options_.out);
    std::fflush(options_.out);
    drawn_ = true;
  }
}

}  // namespace ferry::examples
