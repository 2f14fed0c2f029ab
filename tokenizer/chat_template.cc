#include "ferry/tokenizer/chat_template.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ferry::tokenizer {
namespace {

// At most this much of an unknown template goes into its error.
constexpr size_t kQuoted = 80;

// The start of `source` on one line, for an error message.
std::string Quote(absl::string_view source) {
  std::string out;
  for (char c : source.substr(0, kQuoted)) {
    out += c == '\n' ? ' ' : c;
  }
  if (source.size() > kQuoted) out += "...";
  return out;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromSource(
    absl::string_view source, absl::string_view origin) {
  if (absl::StripAsciiWhitespace(source).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": the chat template is empty"));
  }
  const auto has = [source](absl::string_view marker) {
    return absl::StrContains(source, marker);
  };
  const bool bos = has("bos_token");
  // Markers in the order llama.cpp tests them, so that a template both
  // recognise gets one family (phi-4's <|im_sep|> and SmolVLM's
  // <end_of_utterance> mark ChatML look-alikes that are not).
  if (has("<|im_start|>")) {
    if (!has("<|im_sep|>") && !has("<end_of_utterance>")) {
      return ChatTemplate(ChatFamily::kChatMl, bos);
    }
  } else if (has("[INST]")) {
    // Mistral and llama-2: not a family ferry formats.
  } else if (has("<|assistant|>") && has("<|end|>")) {
    return ChatTemplate(ChatFamily::kPhi3, bos);
  } else if (has("<start_of_turn>")) {
    return ChatTemplate(ChatFamily::kGemma, bos);
  } else if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
    return ChatTemplate(ChatFamily::kLlama3, bos);
  }
  return absl::UnimplementedError(absl::StrCat(
      origin, ": unknown chat template '", Quote(source),
      "'; ferry formats chatml, llama3, gemma and phi3: name one to use it"));
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromName(absl::string_view name) {
  if (name == "chatml" || name == "qwen") {
    return ChatTemplate(ChatFamily::kChatMl, false);
  }
  if (name == "llama3") return ChatTemplate(ChatFamily::kLlama3, true);
  if (name == "gemma") return ChatTemplate(ChatFamily::kGemma, true);
  if (name == "phi3") return ChatTemplate(ChatFamily::kPhi3, false);
  return absl::InvalidArgumentError(
      absl::StrCat("chat template '", name,
                   "' is not one of chatml, qwen, llama3, gemma, phi3"));
}

absl::string_view ChatTemplate::name() const {
  switch (family_) {
    case ChatFamily::kChatMl:
      return "chatml";
    case ChatFamily::kLlama3:
      return "llama3";
    case ChatFamily::kGemma:
      return "gemma";
    case ChatFamily::kPhi3:
      return "phi3";
  }
  return "?";
}

absl::StatusOr<std::string> ChatTemplate::Apply(
    absl::Span<const ChatMessage> messages, const ApplyOptions& options) const {
  if (messages.empty()) {
    return absl::InvalidArgumentError("chat: no messages");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role.empty() || absl::StrContains(role, '\n')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chat: message ", i, " has role '", role, "', not a single word"));
    }
  }
  std::string out;
  if (renders_bos_) out = options.bos_token;
  switch (family_) {
    case ChatFamily::kChatMl:
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content,
                        "<|im_end|>\n");
      }
      if (options.add_generation_prompt) {
        absl::StrAppend(&out, "<|im_start|>assistant\n");
      }
      break;
    case ChatFamily::kLlama3:
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&out, "<|start_header_id|>", m.role,
                        "<|end_header_id|>\n\n",
                        absl::StripAsciiWhitespace(m.content), "<|eot_id|>");
      }
      if (options.add_generation_prompt) {
        absl::StrAppend(&out,
                        "<|start_header_id|>assistant<|end_header_id|>\n\n");
      }
      break;
    case ChatFamily::kGemma: {
      // Gemma has no system turn: the system text opens the next user turn.
      std::string system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          absl::StrAppend(&system, absl::StripAsciiWhitespace(m.content));
          continue;
        }
        const bool model = m.role == "assistant";
        absl::StrAppend(&out, "<start_of_turn>", model ? "model" : m.role,
                        "\n");
        if (!system.empty() && !model) {
          absl::StrAppend(&out, system, "\n\n");
          system.clear();
        }
        absl::StrAppend(&out, absl::StripAsciiWhitespace(m.content),
                        "<end_of_turn>\n");
      }
      if (options.add_generation_prompt) {
        absl::StrAppend(&out, "<start_of_turn>model\n");
      }
      break;
    }
    case ChatFamily::kPhi3:
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, "<|end|>\n");
      }
      if (options.add_generation_prompt)
        absl::StrAppend(&out, "<|assistant|>\n");
      break;
  }
  return out;
}

}  // namespace ferry::tokenizer
