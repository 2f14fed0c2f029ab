// Renders trace spans as an SVG timeline: one row per track, one rectangle
// per span, time along x. A picture of the same data WriteChromeTrace writes.
#ifndef FERRY_EXAMPLES_TIMELINE_SVG_H_
#define FERRY_EXAMPLES_TIMELINE_SVG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ferry/runtime/trace.h"

namespace ferry::examples {

// `tracks` names the track ids of `spans`; empty tracks are left out.
std::string RenderTimelineSvg(const std::vector<TraceSpan>& spans,
                              const std::vector<std::string>& tracks);

// Renders TraceRecorder::Global()'s spans into `path`.
absl::Status WriteTimelineSvg(const std::string& path);

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_TIMELINE_SVG_H_
