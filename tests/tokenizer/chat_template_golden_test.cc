// Real model chat templates rendered by ChatTemplate (minja) against Python's Jinja2 rendering
// them as transformers' apply_chat_template does: every template x conversation x
// add_generation_prompt must give the same bytes, or the same refusal. Inputs and goldens are
// in tests/tokenizer/testdata/chat_templates/ (conversations.json, *.jinja, goldens/*.json),
// written by tests/tokenizer/chat_template_goldens.py; the ctest chat_template_goldens_check
// re-runs it against the committed goldens so they cannot drift from Jinja2.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/status_matchers.h"
#include "tokenizer/chat_template.h"

namespace kvserve {
namespace {

using Json = nlohmann::ordered_json;  // keeps the tools' key order, which tojson shows

const std::filesystem::path kData =
    std::filesystem::path(KVSERVE_SOURCE_DIR) / "tests/tokenizer/testdata/chat_templates";

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<ChatMessage> Messages(const Json& conversation) {
  std::vector<ChatMessage> messages;
  for (const Json& m : conversation.at("messages")) {
    ChatMessage& message = messages.emplace_back();
    message.role = m.at("role").get<std::string>();
    if (!m.at("content").is_null()) message.content = m.at("content").get<std::string>();
    for (const Json& call : m.value("tool_calls", Json::array())) {
      message.tool_calls.push_back(
          {.id = call.value("id", ""),
           .name = call.at("function").at("name").get<std::string>(),
           .arguments = call.at("function").at("arguments").get<std::string>()});
    }
    message.tool_call_id = m.value("tool_call_id", "");
    message.name = m.value("name", "");
  }
  return messages;
}

// Where two renderings part: the line of the first differing byte in both, escaped, with the
// lines before it for context.
std::string ReadableDiff(const std::string& expected, const std::string& actual) {
  const size_t at =
      std::mismatch(expected.begin(), expected.end(), actual.begin(), actual.end()).first -
      expected.begin();
  const auto around = [at](const std::string& text) {
    size_t begin = text.rfind('\n', at == 0 ? 0 : at - 1);
    for (int lines = 0; lines < 2 && begin != std::string::npos && begin > 0; ++lines) {
      begin = text.rfind('\n', begin - 1);
    }
    begin = begin == std::string::npos ? 0 : begin + 1;
    const size_t end =
        std::min(text.size(),
                 text.find('\n', at) == std::string::npos ? text.size() : text.find('\n', at) + 1);
    std::string out;
    for (absl::string_view line : absl::StrSplit(text.substr(begin, end - begin), '\n')) {
      absl::StrAppend(&out, "    | ", absl::CHexEscape(line), "\n");
    }
    return out;
  };
  return absl::StrCat("first difference at byte ", at, " (lengths ", expected.size(), " and ",
                      actual.size(), ")\n  Jinja2:\n", around(expected), "  minja:\n",
                      around(actual));
}

TEST(ChatTemplateGoldenTest, RealTemplatesRenderAsJinja2) {
  const Json inputs = Json::parse(ReadFile(kData / "conversations.json"));
  absl::CivilSecond fixed_now;
  ASSERT_TRUE(absl::ParseCivilTime(inputs.at("fixed_now").get<std::string>(), &fixed_now));
  std::vector<std::string> tools;
  for (const Json& tool : inputs.at("tools")) tools.push_back(tool.dump());

  std::vector<std::filesystem::path> golden_files;
  for (const auto& entry : std::filesystem::directory_iterator(kData / "goldens")) {
    golden_files.push_back(entry.path());
  }
  std::sort(golden_files.begin(), golden_files.end());
  ASSERT_GE(golden_files.size(), 8u);

  int cases = 0;
  int refusals = 0;
  for (const std::filesystem::path& file : golden_files) {
    const Json golden = Json::parse(ReadFile(file));
    const std::string name = golden.at("template").get<std::string>();
    SCOPED_TRACE(name);
    absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(
        ReadFile(kData / name), golden.at("bos_token").get<std::string>(),
        golden.at("eos_token").get<std::string>(), [fixed_now] { return fixed_now; });
    KVSERVE_ASSERT_OK(chat);
    EXPECT_EQ(chat->object_arguments(), golden.at("object_arguments").get<bool>());
    for (const Json& expected : golden.at("cases")) {
      const std::string conversation_name = expected.at("conversation").get<std::string>();
      const auto conversation =
          std::find_if(inputs.at("conversations").begin(), inputs.at("conversations").end(),
                       [&](const Json& c) { return c.at("name") == conversation_name; });
      ASSERT_NE(conversation, inputs.at("conversations").end()) << conversation_name;
      const bool add_generation_prompt = expected.at("add_generation_prompt").get<bool>();
      SCOPED_TRACE(
          absl::StrCat(conversation_name, ", add_generation_prompt ", add_generation_prompt));
      const absl::StatusOr<std::string> text =
          chat->Render(Messages(*conversation), add_generation_prompt,
                       conversation->value("tools", false) ? tools : std::vector<std::string>{});
      ++cases;
      if (expected.contains("text")) {
        const std::string want = expected.at("text").get<std::string>();
        if (!text.ok()) {
          ADD_FAILURE() << "Jinja2 renders it, minja refuses: " << text.status();
        } else if (*text != want) {
          ADD_FAILURE() << ReadableDiff(want, *text);
        }
        continue;
      }
      ++refusals;
      if (text.ok()) {
        ADD_FAILURE() << "Jinja2 refuses (" << expected.at("error").get<std::string>()
                      << "), minja renders:\n"
                      << *text;
        continue;
      }
      EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
      if (expected.at("raised").get<bool>()) {
        // raise_exception: the template's own message, as transformers reports it.
        EXPECT_EQ(text.status().message(), expected.at("error").get<std::string>());
      } else {
        // An error of the engines themselves (e.g. None + str): each words it its own way.
        EXPECT_TRUE(absl::StartsWith(text.status().message(), "chat template failed: ") ||
                    (absl::StartsWith(text.status().message(), "messages[") &&
                     absl::StrContains(text.status().message(), "]: chat template failed: ")))
            << text.status() << " where Jinja2 says " << expected.at("error");
        EXPECT_EQ(text.status().message().find('\n'), absl::string_view::npos) << text.status();
      }
    }
  }
  std::cout << golden_files.size() << " templates, " << cases << " cases (" << refusals
            << " refused by both engines)\n";
}

}  // namespace
}  // namespace kvserve
