#include "ferry/runtime/trace.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ferry {
namespace {

void AppendJsonString(std::string& out, absl::string_view s) {
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

}  // namespace

TraceRecorder& TraceRecorder::Global() {
  static TraceRecorder* const recorder = new TraceRecorder();
  return *recorder;
}

int64_t TraceRecorder::NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int TraceRecorder::Track(absl::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < tracks_.size(); ++i) {
    if (tracks_[i] == name) return static_cast<int>(i);
  }
  tracks_.emplace_back(name);
  return static_cast<int>(tracks_.size() - 1);
}

TraceRecorder::ThreadBuffer& TraceRecorder::LocalBuffer() {
  // One buffer per (thread, recorder); buffers outlive their threads.
  // Keyed by a unique id, not the address, which a later recorder may reuse.
  thread_local std::vector<std::pair<uint64_t, std::shared_ptr<ThreadBuffer>>>
      local;
  for (auto& [id, buffer] : local) {
    if (id == id_) return *buffer;
  }
  auto buffer = std::make_shared<ThreadBuffer>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    buffers_.push_back(buffer);
  }
  local.emplace_back(id_, buffer);
  return *buffer;
}

void TraceRecorder::Record(int track, absl::string_view name, int64_t begin_ns,
                           int64_t end_ns,
                           std::initializer_list<TraceArg> args) {
  if (!enabled()) return;
  Insert(track, name, begin_ns, end_ns, args);
}

void TraceRecorder::Insert(int track, absl::string_view name, int64_t begin_ns,
                           int64_t end_ns,
                           std::initializer_list<TraceArg> args) {
  TraceSpan span;
  span.track = track;
  span.name = std::string(name);
  span.begin_ns = begin_ns;
  span.end_ns = end_ns;
  size_t i = 0;
  for (const TraceArg& arg : args) {
    if (i == span.args.size()) break;
    span.args[i++] = arg;
  }
  ThreadBuffer& buffer = LocalBuffer();
  std::lock_guard<std::mutex> lock(buffer.mu);
  buffer.spans.push_back(std::move(span));
}

std::vector<TraceSpan> TraceRecorder::Spans() const {
  std::vector<TraceSpan> all;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& buffer : buffers_) {
    std::lock_guard<std::mutex> buffer_lock(buffer->mu);
    all.insert(all.end(), buffer->spans.begin(), buffer->spans.end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const TraceSpan& a, const TraceSpan& b) {
                     return a.begin_ns < b.begin_ns;
                   });
  return all;
}

std::vector<std::string> TraceRecorder::TrackNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tracks_;
}

void TraceRecorder::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& buffer : buffers_) {
    std::lock_guard<std::mutex> buffer_lock(buffer->mu);
    buffer->spans.clear();
  }
}

std::string TraceRecorder::ToChromeTraceJson() const {
  const std::vector<TraceSpan> spans = Spans();
  const std::vector<std::string> tracks = TrackNames();
  int64_t origin = spans.empty() ? 0 : spans.front().begin_ns;
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  auto separator = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  // One process per device (the track name up to its first '/': "sim0",
  // "cpu", "sched", "disk"), one thread per track, both named.
  std::vector<std::string> processes;
  std::vector<int> pid_of_track(tracks.size());
  for (size_t t = 0; t < tracks.size(); ++t) {
    const std::string process = tracks[t].substr(0, tracks[t].find('/'));
    auto it = std::find(processes.begin(), processes.end(), process);
    if (it == processes.end()) {
      processes.push_back(process);
      it = processes.end() - 1;
    }
    pid_of_track[t] = static_cast<int>(it - processes.begin()) + 1;
  }
  for (size_t p = 0; p < processes.size(); ++p) {
    separator();
    absl::StrAppend(&out, "{\"ph\":\"M\",\"pid\":", p + 1,
                    ",\"name\":\"process_name\",\"args\":{\"name\":");
    AppendJsonString(out, processes[p]);
    absl::StrAppend(&out, "}}");
  }
  for (size_t t = 0; t < tracks.size(); ++t) {
    separator();
    absl::StrAppend(&out, "{\"ph\":\"M\",\"pid\":", pid_of_track[t],
                    ",\"tid\":", t,
                    ",\"name\":\"thread_name\",\"args\":{\"name\":");
    AppendJsonString(out, tracks[t]);
    absl::StrAppend(&out, "}}");
  }
  for (const TraceSpan& span : spans) {
    separator();
    const int pid =
        span.track >= 0 && span.track < static_cast<int>(tracks.size())
            ? pid_of_track[span.track]
            : 0;
    absl::StrAppend(&out, "{\"ph\":\"X\",\"pid\":", pid,
                    ",\"tid\":", span.track, ",\"name\":");
    AppendJsonString(out, span.name.empty() ? "(unnamed)" : span.name);
    absl::StrAppendFormat(&out, ",\"ts\":%.3f,\"dur\":%.3f",
                          (span.begin_ns - origin) / 1e3,
                          (span.end_ns - span.begin_ns) / 1e3);
    out += ",\"args\":{";
    bool first_arg = true;
    for (const TraceArg& arg : span.args) {
      if (arg.key == nullptr) break;
      if (!first_arg) out += ",";
      first_arg = false;
      AppendJsonString(out, arg.key);
      absl::StrAppend(&out, ":", arg.value);
    }
    out += "}}";
  }
  out += "\n]}\n";
  return out;
}

absl::Status TraceRecorder::WriteChromeTrace(const std::string& path) const {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) {
    return absl::UnavailableError(
        absl::StrCat("cannot open trace file '", path, "' for writing"));
  }
  file << ToChromeTraceJson();
  file.close();
  if (!file) {
    return absl::DataLossError(
        absl::StrCat("failed writing trace file '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace ferry
