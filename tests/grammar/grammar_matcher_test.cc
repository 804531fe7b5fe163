// Matcher: random walks that sample only allowed tokens always end in text the constraint
// describes (JSON object, JSON schema, regex, choice, EBNF), on the default model's vocabulary
// and on a small synthetic one; stop tokens, rollback, the mask's padding, ApplyTokenMask.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grammar/matcher.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/grammar/grammar_test_util.h"
#include "tests/grammar/json_text.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::grammar_test::Mask;
using ::kvserve::grammar_test::NewMatcher;
using ::kvserve::grammar_test::RandomWalk;
using ::kvserve::grammar_test::Walk;
using ::kvserve::testing::StatusIs;
using Json = nlohmann::json;

constexpr int kSeeds = 50;

GrammarCompiler& ModelCompiler() {
  static GrammarCompiler* const compiler = [] {
    const grammar_test::ModelVocabulary* model = grammar_test::DefaultModelVocabulary();
    return model == nullptr ? nullptr : grammar_test::CompilerFor(model->vocabulary);
  }();
  return *compiler;
}

const GrammarVocabulary& ModelVocab() { return grammar_test::DefaultModelVocabulary()->vocabulary; }

const grammar_test::Synthetic& Tiny() {
  static const grammar_test::Synthetic* const tiny =
      new grammar_test::Synthetic(grammar_test::SyntheticVocabulary());
  return *tiny;
}

GrammarCompiler& TinyCompiler() {
  static GrammarCompiler* const compiler = grammar_test::CompilerFor(Tiny().vocabulary);
  return *compiler;
}

// Walks `kSeeds` seeds of `constraint` on the model's vocabulary and hands each finished text
// to `check`.
template <typename Check>
void WalkModel(const Constraint& constraint, int free_steps, Check check) {
  ASSERT_NE(grammar_test::DefaultModelVocabulary(), nullptr);
  for (uint32_t seed = 1; seed <= kSeeds; ++seed) {
    std::unique_ptr<Matcher> matcher = NewMatcher(ModelCompiler(), constraint);
    ASSERT_NE(matcher, nullptr);
    const Walk walk = RandomWalk(*matcher, ModelVocab(), seed, free_steps);
    ASSERT_TRUE(walk.terminated) << "seed " << seed << " did not end: " << walk.text;
    SCOPED_TRACE(absl::StrCat("seed ", seed, ": ", walk.text));
    check(walk.text);
  }
}

// The JSON value of `text`; a test failure when it is not JSON.
Json ParseJson(const std::string& text) {
  Json value = grammar_test::ParseJsonText(text);
  EXPECT_FALSE(value.is_discarded()) << "not JSON: " << text;
  return value;
}

TEST(MatcherTest, JsonObjectWalksAlwaysGiveAJsonObject) {
  WalkModel({Constraint::kJsonObject, "", {}}, /*free_steps=*/40,
            [](const std::string& text) { EXPECT_TRUE(ParseJson(text).is_object()); });
}

TEST(MatcherTest, JsonObjectWalksOnTheSyntheticVocabulary) {
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    std::unique_ptr<Matcher> matcher =
        NewMatcher(TinyCompiler(), {Constraint::kJsonObject, "", {}});
    ASSERT_NE(matcher, nullptr);
    const Walk walk = RandomWalk(*matcher, Tiny().vocabulary, seed, /*free_steps=*/60);
    ASSERT_TRUE(walk.terminated) << "seed " << seed;
    EXPECT_TRUE(ParseJson(walk.text).is_object()) << "seed " << seed << ": " << walk.text;
  }
}

constexpr char kPersonSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "score": {"type": "number", "minimum": -5, "maximum": 5},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
             "minItems": 1, "maxItems": 3},
    "color": {"enum": ["red", "green", "blue"]},
    "id": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 999},
                     {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}]},
    "address": {"$ref": "#/$defs/address"},
    "active": {"type": "boolean"}
  },
  "required": ["name", "age", "score", "tags", "color", "id", "address"],
  "$defs": {
    "address": {
      "type": "object",
      "properties": {
        "street": {"type": "string", "maxLength": 20},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "lines": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}
      },
      "required": ["street", "zip"]
    }
  }
})";

size_t CodePoints(const std::string& utf8) {
  size_t count = 0;
  for (unsigned char c : utf8) count += (c & 0xC0) != 0x80;
  return count;
}

void CheckPerson(const Json& person) {
  ASSERT_TRUE(person.is_object());
  for (const char* key : {"name", "age", "score", "tags", "color", "id", "address"}) {
    ASSERT_TRUE(person.contains(key)) << key;
  }
  for (const auto& [key, value] : person.items()) {
    EXPECT_TRUE(key == "name" || key == "age" || key == "score" || key == "tags" ||
                key == "color" || key == "id" || key == "address" || key == "active")
        << "unexpected property " << key;
  }
  const Json& name = person["name"];
  ASSERT_TRUE(name.is_string());
  EXPECT_GE(CodePoints(name.get<std::string>()), 1u);
  EXPECT_LE(CodePoints(name.get<std::string>()), 12u);
  ASSERT_TRUE(person["age"].is_number_integer());
  EXPECT_GE(person["age"].get<int64_t>(), 0);
  EXPECT_LE(person["age"].get<int64_t>(), 150);
  ASSERT_TRUE(person["score"].is_number());
  EXPECT_GE(person["score"].get<double>(), -5.0);
  EXPECT_LE(person["score"].get<double>(), 5.0);
  const Json& tags = person["tags"];
  ASSERT_TRUE(tags.is_array());
  EXPECT_GE(tags.size(), 1u);
  EXPECT_LE(tags.size(), 3u);
  for (const Json& tag : tags) {
    ASSERT_TRUE(tag.is_string());
    EXPECT_LE(CodePoints(tag.get<std::string>()), 6u);
  }
  const Json& color = person["color"];
  EXPECT_TRUE(color == "red" || color == "green" || color == "blue") << color;
  const Json& id = person["id"];
  if (id.is_number_integer()) {
    EXPECT_GE(id.get<int64_t>(), 1);
    EXPECT_LE(id.get<int64_t>(), 999);
  } else {
    ASSERT_TRUE(id.is_string()) << id;
    EXPECT_TRUE(std::regex_match(id.get<std::string>(), std::regex("[A-Z]{2}[0-9]{3}"))) << id;
  }
  const Json& address = person["address"];
  ASSERT_TRUE(address.is_object());
  ASSERT_TRUE(address.contains("street") && address["street"].is_string());
  EXPECT_LE(CodePoints(address["street"].get<std::string>()), 20u);
  ASSERT_TRUE(address.contains("zip") && address["zip"].is_string());
  EXPECT_TRUE(std::regex_match(address["zip"].get<std::string>(), std::regex("[0-9]{5}")));
  if (address.contains("lines")) {
    ASSERT_TRUE(address["lines"].is_array());
    EXPECT_LE(address["lines"].size(), 2u);
    for (const Json& line : address["lines"]) EXPECT_TRUE(line.is_number_integer());
  }
  for (const auto& [key, value] : address.items()) {
    EXPECT_TRUE(key == "street" || key == "zip" || key == "lines") << key;
  }
  if (person.contains("active")) {
    EXPECT_TRUE(person["active"].is_boolean());
  }
}

TEST(MatcherTest, JsonSchemaWalksAlwaysGiveAValidDocument) {
  WalkModel({Constraint::kJsonSchema, kPersonSchema, {}}, /*free_steps=*/60,
            [](const std::string& text) { CheckPerson(ParseJson(text)); });
}

TEST(MatcherTest, RegexWalksAlwaysMatch) {
  const std::string pattern = R"([a-z]{1,8}@[a-z]{2,6}\.(com|org|net)( #[0-9]{1,4})?)";
  WalkModel({Constraint::kRegex, pattern, {}}, /*free_steps=*/10, [&](const std::string& text) {
    EXPECT_TRUE(std::regex_match(text, std::regex(pattern)));
  });
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    std::unique_ptr<Matcher> matcher =
        NewMatcher(TinyCompiler(), {Constraint::kRegex, pattern, {}});
    ASSERT_NE(matcher, nullptr);
    const Walk walk = RandomWalk(*matcher, Tiny().vocabulary, seed, /*free_steps=*/10);
    ASSERT_TRUE(walk.terminated);
    EXPECT_TRUE(std::regex_match(walk.text, std::regex(pattern))) << walk.text;
  }
}

TEST(MatcherTest, ChoiceWalksAlwaysGiveOneChoice) {
  // Prefixes of one another, and characters a grammar literal must escape.
  const std::vector<std::string> choices = {
      "yes", "yes, please", "no", "say \"hi\"", "back\\slash", "two\nlines", "\xC3\xA9t\xC3\xA9"};
  const Constraint constraint{Constraint::kChoice, "", choices};
  auto is_choice = [&choices](const std::string& text) {
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
  };
  WalkModel(constraint, /*free_steps=*/5, is_choice);
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    std::unique_ptr<Matcher> matcher = NewMatcher(TinyCompiler(), constraint);
    ASSERT_NE(matcher, nullptr);
    const Walk walk = RandomWalk(*matcher, Tiny().vocabulary, seed, /*free_steps=*/100);
    ASSERT_TRUE(walk.terminated);
    is_choice(walk.text);
  }
}

constexpr char kArithmetic[] = R"ebnf(
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")"
number ::= [0-9]+
)ebnf";

// A recursive-descent reader of kArithmetic: true when all of `text` is one expr.
class ArithmeticReader {
 public:
  explicit ArithmeticReader(const std::string& text) : text_(text) {}
  bool ReadAll() { return Expr() && pos_ == text_.size(); }

 private:
  bool Expr() { return Chain(&ArithmeticReader::Term, "+-"); }
  bool Term() { return Chain(&ArithmeticReader::Factor, "*/"); }
  bool Chain(bool (ArithmeticReader::*operand)(), const char* ops) {
    if (!(this->*operand)()) return false;
    while (pos_ < text_.size() && std::strchr(ops, text_[pos_]) != nullptr) {
      ++pos_;
      if (!(this->*operand)()) return false;
    }
    return true;
  }
  bool Factor() {
    if (pos_ < text_.size() && text_[pos_] == '(') {
      ++pos_;
      if (!Expr() || pos_ >= text_.size() || text_[pos_] != ')') return false;
      ++pos_;
      return true;
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    return pos_ > start;
  }
  const std::string& text_;
  size_t pos_ = 0;
};

TEST(MatcherTest, EbnfArithmeticWalksAlwaysParse) {
  const Constraint constraint{Constraint::kGrammar, kArithmetic, {}};
  auto parses = [](const std::string& text) { EXPECT_TRUE(ArithmeticReader(text).ReadAll()); };
  WalkModel(constraint, /*free_steps=*/30, parses);
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    std::unique_ptr<Matcher> matcher = NewMatcher(TinyCompiler(), constraint);
    ASSERT_NE(matcher, nullptr);
    const Walk walk = RandomWalk(*matcher, Tiny().vocabulary, seed, /*free_steps=*/30);
    ASSERT_TRUE(walk.terminated);
    parses(walk.text);
  }
}

// The longest run of JSON whitespace outside strings in `text`.
size_t LongestWhitespaceRun(const std::string& text) {
  size_t longest = 0, run = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      in_string = escaped || c != '"';
      escaped = !escaped && c == '\\';
      continue;
    }
    in_string = c == '"';
    run = std::strchr(" \n\r\t", c) != nullptr && c != '\0' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

TEST(MatcherTest, WhitespaceOptionsBoundTheWhitespaceBetweenTokens) {
  const grammar_test::ModelVocabulary* model = grammar_test::DefaultModelVocabulary();
  ASSERT_NE(model, nullptr);
  GrammarCompilerOptions bounded;
  bounded.json_max_whitespace = 2;
  GrammarCompilerOptions compact;
  compact.json_any_whitespace = false;
  for (const GrammarCompilerOptions& options : {bounded, compact}) {
    auto compiler = GrammarCompiler::Create(model->vocabulary, options);
    KVSERVE_ASSERT_OK(compiler);
    for (uint32_t seed = 1; seed <= 10; ++seed) {
      std::unique_ptr<Matcher> matcher =
          NewMatcher(**compiler, {Constraint::kJsonSchema, kPersonSchema, {}});
      ASSERT_NE(matcher, nullptr);
      const Walk walk = RandomWalk(*matcher, model->vocabulary, seed, /*free_steps=*/60);
      ASSERT_TRUE(walk.terminated);
      CheckPerson(ParseJson(walk.text));
      // Compact output has only the one space after ':' and ','.
      EXPECT_LE(LongestWhitespaceRun(walk.text), options.json_any_whitespace ? 2u : 1u)
          << walk.text;
      if (!options.json_any_whitespace) {
        EXPECT_EQ(walk.text.find('\n'), std::string::npos) << walk.text;
      }
    }
  }
}

// Pins the two patches of third_party/xgrammar (README.md there): no raw control character in a
// length-bounded JSON string, no UTF-16 surrogate (ED A0..BF xx) in any string.
TEST(MatcherTest, JsonStringsRefuseControlCharactersAndSurrogates) {
  GrammarVocabulary vocabulary;
  vocabulary.token_bytes = {"{\"a\": \"", "x",    "\"}",      "\x1a",     "\t", "\xed\xa1\xb9",
                            "\xed",       "\xa1", "\x9f\xbf", "\xc3\xa9", ""};
  vocabulary.vocab_size = static_cast<int32_t>(vocabulary.token_bytes.size());
  vocabulary.stop_token_ids = {10};
  auto compiler = GrammarCompiler::Create(vocabulary);
  KVSERVE_ASSERT_OK(compiler);
  for (const char* schema : {R"({"type": "object", "properties": {"a": {"type": "string"}},
                                 "required": ["a"]})",
                             R"({"type": "object", "properties": {"a": {"type": "string",
                                 "maxLength": 5}}, "required": ["a"]})"}) {
    std::unique_ptr<Matcher> matcher =
        NewMatcher(**compiler, {Constraint::kJsonSchema, schema, {}});
    ASSERT_NE(matcher, nullptr);
    ASSERT_TRUE(matcher->AcceptToken(0));
    const std::vector<int32_t> allowed = grammar_test::AllowedTokens(Mask(*matcher), 11);
    // "x", "\"}", ED (may start U+D000..U+D7FF), "é"; not 0x1A, tab, a surrogate or a lone
    // continuation byte.
    EXPECT_EQ(allowed, (std::vector<int32_t>{1, 2, 6, 9})) << schema;
    ASSERT_TRUE(matcher->AcceptToken(6));
    // After ED only 80..9F may follow: "\x9f\xbf" completes U+D7FF, A1 would be a surrogate.
    EXPECT_FALSE(matcher->AcceptToken(7)) << schema;
    EXPECT_TRUE(matcher->AcceptToken(8)) << schema;
  }
}

TEST(MatcherTest, StopIsRefusedUntilTheGrammarMayEnd) {
  const grammar_test::Synthetic& tiny = Tiny();
  std::unique_ptr<Matcher> matcher =
      NewMatcher(TinyCompiler(), {Constraint::kChoice, "", {"ab", "abc"}});
  ASSERT_NE(matcher, nullptr);
  auto stop_bit = [&](const std::vector<uint32_t>& mask) {
    return ((mask[tiny.eos_id / 32] >> (tiny.eos_id % 32)) & 1u) != 0;
  };
  const auto id_of = [&](const std::string& bytes) {
    const auto& tokens = tiny.vocabulary.token_bytes;
    return static_cast<int32_t>(std::find(tokens.begin(), tokens.end(), bytes) - tokens.begin());
  };
  EXPECT_FALSE(stop_bit(Mask(*matcher)));
  EXPECT_FALSE(matcher->CanStop());
  EXPECT_FALSE(matcher->AcceptToken(tiny.eos_id));
  ASSERT_TRUE(matcher->AcceptToken(id_of("a")));
  EXPECT_FALSE(stop_bit(Mask(*matcher)));
  EXPECT_FALSE(matcher->AcceptToken(tiny.eos_id));
  ASSERT_TRUE(matcher->AcceptToken(id_of("b")));
  // "ab" is complete and "abc" still possible: both stop and "c" are allowed.
  const std::vector<uint32_t> mask = Mask(*matcher);
  EXPECT_TRUE(stop_bit(mask));
  EXPECT_TRUE(matcher->CanStop());
  EXPECT_EQ(grammar_test::AllowedTokens(mask, matcher->vocab_size()),
            (std::vector<int32_t>{id_of("c"), tiny.eos_id}));
  ASSERT_TRUE(matcher->AcceptToken(tiny.eos_id));
  EXPECT_TRUE(matcher->IsTerminated());
  EXPECT_FALSE(matcher->CanStop());
  EXPECT_FALSE(matcher->AcceptToken(id_of("c")));
  EXPECT_EQ(grammar_test::AllowedTokens(Mask(*matcher), matcher->vocab_size()),
            std::vector<int32_t>{});
  // Rolling the stop token back reopens the match.
  KVSERVE_ASSERT_OK(matcher->Rollback(1));
  EXPECT_FALSE(matcher->IsTerminated());
  EXPECT_TRUE(matcher->AcceptToken(id_of("c")));
  EXPECT_TRUE(matcher->AcceptToken(tiny.eos_id));
}

TEST(MatcherTest, ControlAndPaddingTokensAreNeverAllowed) {
  const grammar_test::Synthetic& tiny = Tiny();
  std::unique_ptr<Matcher> matcher = NewMatcher(TinyCompiler(), {Constraint::kJsonObject, "", {}});
  ASSERT_NE(matcher, nullptr);
  const int32_t num_tokens = static_cast<int32_t>(tiny.vocabulary.token_bytes.size());
  const Walk walk = RandomWalk(*matcher, tiny.vocabulary, 7, /*free_steps=*/5, /*max_steps=*/12);
  for (int step = 0; step < 3; ++step) {
    const std::vector<uint32_t> mask = Mask(*matcher);
    for (int32_t id : grammar_test::AllowedTokens(mask, matcher->vocab_size())) {
      EXPECT_NE(id, tiny.control_id);
      EXPECT_LT(id, num_tokens);
    }
    // The bits past vocab_size in the last word are clear too.
    EXPECT_EQ(mask.back() >> (matcher->vocab_size() % 32), 0u);
    EXPECT_FALSE(matcher->AcceptToken(tiny.control_id));
    EXPECT_FALSE(matcher->AcceptToken(num_tokens + 1));
    EXPECT_FALSE(matcher->AcceptToken(-1));
    EXPECT_FALSE(matcher->AcceptToken(matcher->vocab_size()));
  }
}

TEST(MatcherTest, RollbackRestoresEveryEarlierMask) {
  ASSERT_NE(grammar_test::DefaultModelVocabulary(), nullptr);
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    std::unique_ptr<Matcher> matcher =
        NewMatcher(ModelCompiler(), {Constraint::kJsonSchema, kPersonSchema, {}});
    ASSERT_NE(matcher, nullptr);
    const Walk walk = RandomWalk(*matcher, ModelVocab(), seed, /*free_steps=*/60);
    ASSERT_TRUE(walk.terminated);
    // Replay the walk on a fresh matcher, keeping the mask before each token.
    std::unique_ptr<Matcher> replay =
        NewMatcher(ModelCompiler(), {Constraint::kJsonSchema, kPersonSchema, {}});
    std::vector<std::vector<uint32_t>> masks;
    for (int32_t id : walk.ids) {
      masks.push_back(Mask(*replay));
      ASSERT_TRUE(replay->AcceptToken(id));
    }
    ASSERT_TRUE(replay->IsTerminated());
    const int32_t k = static_cast<int32_t>(walk.ids.size());
    EXPECT_EQ(replay->num_accepted_tokens(), k);
    EXPECT_THAT(replay->Rollback(k + 1), StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(replay->Rollback(-1), StatusIs(absl::StatusCode::kInvalidArgument));
    // Back a few tokens at a time, checking the mask each time.
    int32_t position = k;
    std::mt19937 rng(seed);
    while (position > 0) {
      const int32_t back = std::uniform_int_distribution<int32_t>(1, std::min(position, 7))(rng);
      KVSERVE_ASSERT_OK(replay->Rollback(back));
      position -= back;
      ASSERT_EQ(replay->num_accepted_tokens(), position);
      ASSERT_EQ(Mask(*replay), masks[position]) << "seed " << seed << " at " << position;
    }
    // And forward again along the same tokens.
    for (int32_t id : walk.ids) ASSERT_TRUE(replay->AcceptToken(id));
    EXPECT_TRUE(replay->IsTerminated());
  }
}

TEST(MatcherTest, CreateRefusesNull) {
  EXPECT_THAT(Matcher::Create(nullptr), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ApplyTokenMaskTest, DisallowedLogitsBecomeMinusInfinity) {
  const int32_t vocab = 70;
  std::vector<uint32_t> mask(Matcher::MaskWords(vocab), 0);
  const std::vector<int32_t> allowed = {0, 31, 32, 33, 64, 69};
  for (int32_t id : allowed) mask[id / 32] |= 1u << (id % 32);
  mask[1] = ~0u;  // a full word: ids 32..63 all allowed
  std::vector<float> logits(vocab);
  for (int32_t i = 0; i < vocab; ++i) logits[i] = static_cast<float>(i);
  ApplyTokenMask(mask.data(), logits.data(), vocab);
  for (int32_t i = 0; i < vocab; ++i) {
    const bool kept = i == 0 || i == 31 || (i >= 32 && i < 64) || i == 64 || i == 69;
    if (kept) {
      EXPECT_EQ(logits[i], static_cast<float>(i)) << i;
    } else {
      EXPECT_EQ(logits[i], -std::numeric_limits<float>::infinity()) << i;
    }
  }
}

}  // namespace
}  // namespace kvserve
