// Formats one conversation with llama.cpp's own chat template code
// (src/llama-chat.cpp, compiled beside this file by
// tools/make_chat_template_refs.py; not part of ferry's build):
//   chat_template_driver TEMPLATE_FILE ADD_ASSISTANT ROLE CONTENT [ROLE
//   CONTENT]...
// Prints the formatted text; exits 2 when llama.cpp does not recognise the
// template, 3 when it cannot apply it.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "llama-chat.h"
#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 5 || argc % 2 == 0) {
    std::fprintf(stderr, "usage: %s TEMPLATE_FILE 0|1 ROLE CONTENT...\n",
                 argv[0]);
    return 1;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::string source((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
  const bool add_assistant = argv[2][0] == '1';
  std::vector<llama_chat_message> messages;
  for (int i = 3; i + 1 < argc; i += 2) {
    messages.push_back({argv[i], argv[i + 1]});
  }
  std::vector<const llama_chat_message*> chat;
  for (const llama_chat_message& m : messages) chat.push_back(&m);
  const llm_chat_template family = llm_chat_detect_template(source);
  if (family == LLM_CHAT_TEMPLATE_UNKNOWN) return 2;
  std::string out;
  if (llm_chat_apply_template(family, chat, out, add_assistant) < 0) return 3;
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
