#include "ferry/examples/timeline_svg.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ferry::examples {
namespace {

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A stable colour per span name.
std::string Colour(const std::string& name) {
  static constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759",
                                             "#76b7b2", "#59a14f", "#edc948",
                                             "#b07aa1", "#ff9da7", "#9c755f"};
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return kPalette[h % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

}  // namespace

std::string RenderTimelineSvg(const std::vector<TraceSpan>& spans,
                              const std::vector<std::string>& tracks) {
  constexpr int kLabel = 160, kWidth = 1200, kRow = 22, kTop = 30;
  // Rows: tracks that have spans, in name order (groups a device's engines).
  std::vector<int> used;
  int64_t t0 = std::numeric_limits<int64_t>::max(), t1 = 0;
  for (const TraceSpan& s : spans) {
    if (std::find(used.begin(), used.end(), s.track) == used.end()) {
      used.push_back(s.track);
    }
    t0 = std::min(t0, s.begin_ns);
    t1 = std::max(t1, s.end_ns);
  }
  auto track_name = [&](int id) -> std::string {
    return id >= 0 && id < static_cast<int>(tracks.size())
               ? tracks[id]
               : absl::StrCat("track ", id);
  };
  std::sort(used.begin(), used.end(),
            [&](int a, int b) { return track_name(a) < track_name(b); });
  const double span_ns = t1 > t0 ? static_cast<double>(t1 - t0) : 1.0;
  const int height = kTop + kRow * static_cast<int>(used.size()) + 10;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"monospace\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"4\" y=\"16\">ferry timeline: %.3f ms, %d spans</text>\n",
      kLabel + kWidth + 10, height, span_ns / 1e6, spans.size());
  for (size_t row = 0; row < used.size(); ++row) {
    const int y = kTop + kRow * static_cast<int>(row);
    absl::StrAppendFormat(
        &svg,
        "<text x=\"4\" y=\"%d\">%s</text>\n"
        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>\n",
        y + 15, Escape(track_name(used[row])), kLabel, y + kRow - 1,
        kLabel + kWidth, y + kRow - 1);
  }
  for (const TraceSpan& s : spans) {
    const size_t row =
        std::find(used.begin(), used.end(), s.track) - used.begin();
    const double x = kLabel + (s.begin_ns - t0) / span_ns * kWidth;
    const double w = std::max(0.5, (s.end_ns - s.begin_ns) / span_ns * kWidth);
    absl::StrAppendFormat(
        &svg,
        "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
        "<title>%s %.1f us</title></rect>\n",
        x, kTop + kRow * static_cast<int>(row) + 2, w, kRow - 5, Colour(s.name),
        Escape(s.name), (s.end_ns - s.begin_ns) / 1e3);
  }
  svg += "</svg>\n";
  return svg;
}

absl::Status WriteTimelineSvg(const std::string& path) {
  const TraceRecorder& rec = TraceRecorder::Global();
  const std::string svg = RenderTimelineSvg(rec.Spans(), rec.TrackNames());
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"),
                                          &std::fclose);
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write timeline to ", path));
  }
  if (std::fwrite(svg.data(), 1, svg.size(), f.get()) != svg.size()) {
    return absl::DataLossError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

}  // namespace ferry::examples
