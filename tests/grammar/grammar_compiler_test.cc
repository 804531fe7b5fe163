// GrammarCompiler: errors for bad constraints, the cache, the timeout.
#include "grammar/grammar_compiler.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/grammar/grammar_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::grammar_test::kCompileTimeout;
using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;

GrammarCompiler& SyntheticCompiler() {
  static GrammarCompiler* const compiler =
      grammar_test::CompilerFor(grammar_test::SyntheticVocabulary().vocabulary);
  return *compiler;
}

absl::Status CompileStatus(Constraint constraint) {
  return SyntheticCompiler().Compile(constraint, kCompileTimeout).status();
}

TEST(GrammarCompilerTest, InvalidJsonSchemaIsInvalidArgumentNamingTheProblem) {
  EXPECT_THAT(CompileStatus({Constraint::kJsonSchema, "{\"type\": \"object\",", {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid json_schema")));
  EXPECT_THAT(CompileStatus({Constraint::kJsonSchema,
                             R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/b"}}})",
                             {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("$defs/b")));
  EXPECT_THAT(CompileStatus({Constraint::kJsonSchema, "", {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty schema")));
  // The message is the bare reason, without a source file and line of the engine.
  const absl::Status status = CompileStatus({Constraint::kJsonSchema, "[1, 2", {}});
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(status.message()), ::testing::Not(HasSubstr(".cc:")));
}

// Found by grammar_fuzz: a const string with a byte that is not UTF-8 compiled, and the output
// (the const, byte for byte) was not JSON. Constraint texts must be UTF-8, as request
// validation already demands of every entry point.
TEST(GrammarCompilerTest, ConstraintTextThatIsNotUtf8IsInvalidArgument) {
  EXPECT_THAT(
      CompileStatus({Constraint::kJsonSchema, "{\"const\": {\"a\": [1, \"n\xf5mber\"]}}", {}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not UTF-8")));
  EXPECT_THAT(CompileStatus({Constraint::kRegex,
                             "a\xc0\xaf"
                             "b",
                             {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not UTF-8")));
  EXPECT_THAT(CompileStatus({Constraint::kChoice, "", {"yes", "n\xffo"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("choice is not UTF-8")));
  // Multi-byte UTF-8 is fine.
  EXPECT_TRUE(CompileStatus({Constraint::kJsonSchema, "{\"const\": \"n\xc3\xbamero\"}", {}}).ok());
}

TEST(GrammarCompilerTest, InvalidRegexIsInvalidArgument) {
  for (const char* regex : {"(abc", "[a-", "a{2,1}"}) {
    EXPECT_THAT(CompileStatus({Constraint::kRegex, regex, {}}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid regex")))
        << regex;
  }
}

TEST(GrammarCompilerTest, InvalidGrammarIsInvalidArgumentNamingTheRule) {
  EXPECT_THAT(CompileStatus({Constraint::kGrammar, "root ::= item\n", {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("item")));
  EXPECT_THAT(CompileStatus({Constraint::kGrammar, "start ::= \"a\"\n", {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root")));
  EXPECT_THAT(CompileStatus({Constraint::kGrammar, "root ::= \"a\" |\n", {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid grammar")));
}

TEST(GrammarCompilerTest, NoneAndEmptyChoicesAreInvalidArgument) {
  EXPECT_THAT(CompileStatus({}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("none")));
  EXPECT_THAT(CompileStatus({Constraint::kChoice, "", {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
}

TEST(GrammarCompilerTest, CreateRejectsAnInvalidVocabulary) {
  GrammarVocabulary vocabulary = grammar_test::SyntheticVocabulary().vocabulary;
  vocabulary.vocab_size = 3;
  EXPECT_THAT(GrammarCompiler::Create(vocabulary),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab_size")));
}

TEST(GrammarCompilerTest, TheSameConstraintGivesTheSameCompiledObject) {
  const Constraint schema{Constraint::kJsonSchema,
                          R"({"type": "object", "properties": {"n": {"type": "integer"}}})",
                          {}};
  auto first = SyntheticCompiler().Compile(schema, kCompileTimeout);
  KVSERVE_ASSERT_OK(first);
  auto second = SyntheticCompiler().Compile(schema, kCompileTimeout);
  KVSERVE_ASSERT_OK(second);
  EXPECT_EQ(first->get(), second->get());
  // Another text is another entry, even when it means the same.
  Constraint spaced = schema;
  spaced.spec += " ";
  auto third = SyntheticCompiler().Compile(spaced, kCompileTimeout);
  KVSERVE_ASSERT_OK(third);
  EXPECT_NE(first->get(), third->get());
  // Choices are part of the key.
  auto yes = SyntheticCompiler().Compile({Constraint::kChoice, "", {"yes", "no"}}, kCompileTimeout);
  auto no = SyntheticCompiler().Compile({Constraint::kChoice, "", {"yes", "n"}}, kCompileTimeout);
  KVSERVE_ASSERT_OK(yes);
  KVSERVE_ASSERT_OK(no);
  EXPECT_NE(yes->get(), no->get());
}

TEST(GrammarCompilerTest, ConcurrentCompilesOfOneConstraintShareOneResult) {
  const Constraint regex{Constraint::kRegex, "[a-c]{2,5}-[0-9]+", {}};
  std::vector<const CompiledConstraint*> results(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&results, &regex, i] {
      auto compiled = SyntheticCompiler().Compile(regex, kCompileTimeout);
      if (compiled.ok()) results[i] = compiled->get();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const CompiledConstraint* result : results) {
    ASSERT_NE(result, nullptr);
    EXPECT_EQ(result, results[0]);
  }
}

TEST(GrammarCompilerTest, TheCacheKeepsAtMostMaxCachedEntries) {
  GrammarCompilerOptions options;
  options.max_cached = 3;
  auto compiler = GrammarCompiler::Create(grammar_test::SyntheticVocabulary().vocabulary, options);
  KVSERVE_ASSERT_OK(compiler);
  auto regex = [](int i) { return Constraint{Constraint::kRegex, absl::StrCat("a{", i, "}"), {}}; };
  auto first = (*compiler)->Compile(regex(1), kCompileTimeout);
  KVSERVE_ASSERT_OK(first);
  for (int i = 2; i <= 5; ++i) KVSERVE_ASSERT_OK((*compiler)->Compile(regex(i), kCompileTimeout));
  EXPECT_EQ((*compiler)->cache_size(), 3u);
  // The first was evicted: compiled again, a new object.
  auto again = (*compiler)->Compile(regex(1), kCompileTimeout);
  KVSERVE_ASSERT_OK(again);
  EXPECT_NE(first->get(), again->get());
  (*compiler)->ClearCache();
  EXPECT_EQ((*compiler)->cache_size(), 0u);
}

TEST(GrammarCompilerTest, ACompilePastTheTimeoutIsDeadlineExceededAndFinishesInTheBackground) {
  // The real vocabulary: compiling takes milliseconds, far longer than a zero timeout.
  const grammar_test::ModelVocabulary* model = grammar_test::DefaultModelVocabulary();
  ASSERT_NE(model, nullptr);
  auto compiler = GrammarCompiler::Create(model->vocabulary);
  KVSERVE_ASSERT_OK(compiler);
  // A compile can still win the race against a zero wait when this thread is descheduled right
  // after starting it (a loaded machine), so try fresh schemas until one times out: with a
  // broken timeout none would.
  Constraint schema;
  bool timed_out = false;
  for (int i = 0; i < 10 && !timed_out; ++i) {
    schema = Constraint{Constraint::kJsonSchema,
                        absl::StrCat(R"({"type": "object", "properties": {"a)", i,
                                     R"(": {"type": "string"}, "b": {"type": "number"}},
                                     "required": ["b"]})"),
                        {}};
    absl::StatusOr<std::shared_ptr<const CompiledConstraint>> first =
        (*compiler)->Compile(schema, absl::ZeroDuration());
    if (first.ok()) continue;
    EXPECT_THAT(first, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("json_schema")));
    timed_out = true;
  }
  ASSERT_TRUE(timed_out) << "no compile of 10 outlasted a zero timeout";
  auto later = (*compiler)->Compile(schema, kCompileTimeout);
  KVSERVE_ASSERT_OK(later);
  auto cached = (*compiler)->Compile(schema, absl::ZeroDuration());
  KVSERVE_ASSERT_OK(cached);
  EXPECT_EQ(later->get(), cached->get());
}

TEST(GrammarCompilerTest, KindNamesAndKeys) {
  EXPECT_EQ(ConstraintKindName(Constraint::kJsonObject), "json_object");
  EXPECT_EQ(ConstraintKindName(Constraint::kGrammar), "grammar");
  // Lengths keep choice lists apart that would concatenate alike.
  EXPECT_NE(ConstraintKey({Constraint::kChoice, "", {"ab", "c"}}),
            ConstraintKey({Constraint::kChoice, "", {"a", "bc"}}));
  EXPECT_NE(ConstraintKey({Constraint::kRegex, "a", {}}),
            ConstraintKey({Constraint::kGrammar, "a", {}}));
}

}  // namespace
}  // namespace kvserve
