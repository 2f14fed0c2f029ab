#include "ferry/tokenizer/stream_decoder.h"

#include "ferry/tokenizer/utf8.h"

namespace ferry::tokenizer {

std::string StreamDecoder::Push(int32_t id) {
  std::string bytes = tokenizer_.TokenBytes(id, options_);
  if (!started_ && !bytes.empty()) {
    started_ = true;
    if (tokenizer_.spec().decode_strip_leading_space && bytes[0] == ' ') {
      bytes.erase(0, 1);
    }
  }
  pending_ += bytes;
  const size_t complete = CompleteUtf8PrefixLength(pending_);
  std::string out =
      ToValidUtf8(absl::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out = ToValidUtf8(pending_);
  pending_.clear();
  started_ = false;
  return out;
}

}  // namespace ferry::tokenizer
