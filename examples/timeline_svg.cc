#include "ferry/examples/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <utility>

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

// What a span is, for its colour and the legend.
struct Category {
  const char* label;
  const char* colour;
};
constexpr Category kCategories[] = {
    {"mul_mat", "#4e79a7"},
    {"attention (soft_max, rope)", "#e15759"},
    {"norm, element-wise", "#59a14f"},
    {"KV cache, gather", "#b07aa1"},
    {"copy between memories", "#f28e2b"},
    {"host work (enqueue)", "#bab0ac"},
    {"disk", "#9c755f"},
    {"other", "#76b7b2"},
};

bool Has(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

int CategoryOf(const std::string& track, const std::string& name) {
  if (track.rfind("sched", 0) == 0) return 5;
  if (track == "disk") return 6;
  if (Has(track, "h2d") || Has(track, "d2h") || Has(track, "d2d") ||
      Has(track, "copy") || Has(name, "copy ") || Has(name, " -> ")) {
    return 4;
  }
  if (Has(name, "mul_mat")) return 0;
  if (Has(name, "soft_max") || Has(name, "rope")) return 1;
  if (Has(name, "set_rows") || Has(name, "get_rows") || Has(name, "cpy") ||
      Has(name, "cont") || Has(name, "concat")) {
    return 3;
  }
  for (const char* op :
       {"add", "sub", "mul", "div", "scale", "norm", "silu", "gelu", "relu"}) {
    if (Has(name, op)) return 2;
  }
  return 7;
}

bool IsHostTrack(const std::string& track) {
  return track.rfind("sched", 0) == 0 || track == "disk";
}

// A round tick interval (1, 2 or 5 x 10^k ns) giving about 8 ticks.
double TickNanos(double span_ns) {
  const double raw = span_ns / 8;
  double step = std::pow(10.0, std::floor(std::log10(std::max(raw, 1.0))));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (step * m >= raw) return step * m;
  }
  return step * 10;
}

std::string TimeLabel(double ns) {
  if (ns >= 1e9) return absl::StrFormat("%.6g s", ns / 1e9);
  if (ns >= 1e6) return absl::StrFormat("%.6g ms", ns / 1e6);
  if (ns >= 1e3) return absl::StrFormat("%.6g us", ns / 1e3);
  return absl::StrFormat("%.0f ns", ns);
}

}  // namespace

std::string RenderTimelineSvg(const std::vector<TraceSpan>& spans,
                              const std::vector<std::string>& tracks) {
  constexpr int kLabel = 170, kWidth = 1200, kRow = 22, kLegend = 24;
  constexpr int kTop = 30 + kLegend + 20;  // Title, legend, axis labels.
  auto track_name = [&](int id) -> std::string {
    return id >= 0 && id < static_cast<int>(tracks.size())
               ? tracks[id]
               : absl::StrCat("track ", id);
  };
  // Rows: device tracks first (by name, grouping a device's engines), then
  // host tracks, which are not device work.
  std::vector<int> used;
  int64_t t0 = std::numeric_limits<int64_t>::max(), t1 = 0;
  for (const TraceSpan& s : spans) {
    if (std::find(used.begin(), used.end(), s.track) == used.end()) {
      used.push_back(s.track);
    }
    t0 = std::min(t0, s.begin_ns);
    t1 = std::max(t1, s.end_ns);
  }
  if (spans.empty()) t0 = 0;
  std::sort(used.begin(), used.end(), [&](int a, int b) {
    const std::string na = track_name(a), nb = track_name(b);
    return std::make_pair(IsHostTrack(na), na) <
           std::make_pair(IsHostTrack(nb), nb);
  });
  const double span_ns = t1 > t0 ? static_cast<double>(t1 - t0) : 1.0;
  const int rows_bottom = kTop + kRow * static_cast<int>(used.size());
  const int height = rows_bottom + 30;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"monospace\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"4\" y=\"16\">ferry timeline: %s, %d spans (hover a span "
      "for its name and length)</text>\n",
      kLabel + kWidth + 10, height, TimeLabel(span_ns), spans.size());
  // Legend.
  int lx = 4;
  for (const Category& c : kCategories) {
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%d\" y=\"28\" width=\"12\" height=\"12\" "
                          "fill=\"%s\"/><text x=\"%d\" y=\"38\">%s</text>\n",
                          lx, c.colour, lx + 16, Escape(c.label));
    lx += 16 + 7 * static_cast<int>(std::string(c.label).size()) + 14;
  }
  // Time axis: grid lines and labels, above and below the rows.
  const double tick = TickNanos(span_ns);
  for (double t = 0; t <= span_ns + 1; t += tick) {
    const double x = kLabel + t / span_ns * kWidth;
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>\n"
        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n"
        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
        x, kTop - 4, x, rows_bottom, x, kTop - 8, TimeLabel(t), x,
        rows_bottom + 14, TimeLabel(t));
  }
  for (size_t row = 0; row < used.size(); ++row) {
    const int y = kTop + kRow * static_cast<int>(row);
    const std::string name = track_name(used[row]);
    absl::StrAppendFormat(
        &svg,
        "<text x=\"4\" y=\"%d\"%s>%s</text>\n"
        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>\n",
        y + 15, IsHostTrack(name) ? " font-style=\"italic\"" : "",
        Escape(IsHostTrack(name) ? name + " (host)" : name), kLabel,
        y + kRow - 1, kLabel + kWidth, y + kRow - 1);
  }
  for (const TraceSpan& s : spans) {
    const size_t row =
        std::find(used.begin(), used.end(), s.track) - used.begin();
    const std::string track = track_name(s.track);
    const std::string name = s.name.empty() ? "(unnamed)" : s.name;
    const double x = kLabel + (s.begin_ns - t0) / span_ns * kWidth;
    const double w = std::max(0.5, (s.end_ns - s.begin_ns) / span_ns * kWidth);
    const bool host = IsHostTrack(track);
    // Host work is drawn as a thin bar: it occupies no device.
    absl::StrAppendFormat(
        &svg,
        "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
        "<title>%s %.1f us</title></rect>\n",
        x, kTop + kRow * static_cast<int>(row) + (host ? 8 : 2), w,
        host ? 6 : kRow - 5, kCategories[CategoryOf(track, name)].colour,
        Escape(name), (s.end_ns - s.begin_ns) / 1e3);
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
