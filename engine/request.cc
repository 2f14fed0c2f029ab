#include "ferry/engine/request.h"

namespace ferry::engine {

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kContext:
      return "context";
  }
  return "?";
}

}  // namespace ferry::engine
