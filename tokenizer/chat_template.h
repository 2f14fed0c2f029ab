// ChatTemplate: a model's chat template, recognised by family and applied
// to a list of messages in C++ (no Jinja interpreter).
//
// A model ships its template as Jinja source (GGUF's
// tokenizer.chat_template, Hugging Face's tokenizer_config.json
// "chat_template"). The templates of the families ferry runs differ only
// in a few markers, so the source is recognised by those markers, as
// llama.cpp's llama_chat_apply_template does, and each family is formatted
// here:
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n      (SmolLM2, Qwen2,
//           ... <|im_start|>assistant\n                    Qwen2.5, Qwen3)
//   llama3  <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
//           ... <|start_header_id|>assistant<|end_header_id|>\n\n
//   gemma   <start_of_turn>{user|model}\n{content}<end_of_turn>\n
//           ... <start_of_turn>model\n  (a system message is prepended to
//           the next user turn, separated by a blank line: gemma has no
//           system role)
//   phi3    <|{role}|>\n{content}<|end|>\n ... <|assistant|>\n
// llama3 and gemma trim each content's surrounding whitespace, as their
// templates do. The result is what llama_chat_apply_template gives: it
// starts without the BOS token, which the tokenizer adds (templates that
// render bos_token themselves give it at the front: Apply's with_bos).
// An unrecognised template is an error that names it; the caller may then
// pick a family by name (FromName).
#ifndef FERRY_TOKENIZER_CHAT_TEMPLATE_H_
#define FERRY_TOKENIZER_CHAT_TEMPLATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ferry::tokenizer {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant".
  std::string content;
};

enum class ChatFamily { kChatMl, kLlama3, kGemma, kPhi3 };

// Thread-compatible (a value type).
class ChatTemplate {
 public:
  // The family of the Jinja template `source`; `origin` (the file and key)
  // names it in errors. InvalidArgument for an empty source,
  // Unimplemented naming the template's start for an unknown one.
  static absl::StatusOr<ChatTemplate> FromSource(absl::string_view source,
                                                 absl::string_view origin);
  // A family by llama.cpp's name: "chatml", "llama3", "gemma", "phi3"
  // ("qwen" is chatml). InvalidArgument naming the known ones otherwise.
  static absl::StatusOr<ChatTemplate> FromName(absl::string_view name);

  ChatFamily family() const { return family_; }
  // "chatml", "llama3", "gemma" or "phi3".
  absl::string_view name() const;
  // Whether the source renders bos_token itself (llama3's and gemma's do).
  bool renders_bos() const { return renders_bos_; }

  struct ApplyOptions {
    // Ends with the header of the assistant's turn, as a prompt does.
    bool add_generation_prompt = true;
    // Prepended when non-empty and the template renders bos_token, giving
    // what transformers' apply_chat_template renders.
    std::string bos_token;
  };
  // The messages formatted. InvalidArgument for an empty list or a role
  // that is empty or not a single line.
  absl::StatusOr<std::string> Apply(absl::Span<const ChatMessage> messages,
                                    const ApplyOptions& options) const;
  absl::StatusOr<std::string> Apply(
      absl::Span<const ChatMessage> messages) const {
    return Apply(messages, ApplyOptions());
  }

 private:
  explicit ChatTemplate(ChatFamily family, bool renders_bos)
      : family_(family), renders_bos_(renders_bos) {}

  ChatFamily family_;
  bool renders_bos_;
};

}  // namespace ferry::tokenizer

#endif  // FERRY_TOKENIZER_CHAT_TEMPLATE_H_
