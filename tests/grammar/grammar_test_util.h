// Helpers of the grammar/ tests: the default model's vocabulary and a seeded random walk that
// samples only tokens a Matcher allows. The small synthetic vocabulary is in
// synthetic_vocabulary.h, which the fuzzer shares.
#ifndef KVSERVE_TESTS_GRAMMAR_GRAMMAR_TEST_UTIL_H_
#define KVSERVE_TESTS_GRAMMAR_GRAMMAR_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grammar/constraint.h"
#include "grammar/grammar_compiler.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "gtest/gtest.h"
#include "model/default_model.h"
#include "tests/grammar/synthetic_vocabulary.h"
#include "tests/status_matchers.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::grammar_test {

inline constexpr absl::Duration kCompileTimeout = absl::Seconds(120);

// The default model (SmolLM2-135M-Instruct) tokenizer's vocabulary, loaded once; null (and a
// test failure) when the model file is missing.
struct ModelVocabulary {
  std::unique_ptr<Tokenizer> tokenizer;
  GrammarVocabulary vocabulary;
};

inline const ModelVocabulary* DefaultModelVocabulary() {
  static const ModelVocabulary* const loaded = []() -> const ModelVocabulary* {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        Tokenizer::FromModelPath(DefaultModelPath());
    if (!tokenizer.ok() || *tokenizer == nullptr) return nullptr;
    const int32_t eos = (*tokenizer)->eos_id();
    absl::StatusOr<GrammarVocabulary> vocabulary =
        VocabularyFromTokenizer(**tokenizer, (*tokenizer)->vocab_size(), {eos});
    if (!vocabulary.ok()) return nullptr;
    return new ModelVocabulary{std::move(*tokenizer), std::move(*vocabulary)};
  }();
  if (loaded == nullptr) {
    ADD_FAILURE() << "default model tokenizer not loaded from " << DefaultModelPath()
                  << "; run scripts/fetch_model.sh (or set KVSERVE_MODEL)";
  }
  return loaded;
}

// One compiler per vocabulary for the whole test binary (compiles are cached in it).
inline GrammarCompiler* CompilerFor(const GrammarVocabulary& vocabulary) {
  absl::StatusOr<std::unique_ptr<GrammarCompiler>> compiler = GrammarCompiler::Create(vocabulary);
  EXPECT_TRUE(compiler.ok()) << compiler.status();
  return compiler.ok() ? compiler->release() : nullptr;
}

inline std::vector<int32_t> AllowedTokens(const std::vector<uint32_t>& mask, int32_t vocab_size) {
  std::vector<int32_t> allowed;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if ((mask[id / 32] >> (id % 32)) & 1u) allowed.push_back(id);
  }
  return allowed;
}

inline std::vector<uint32_t> Mask(const Matcher& matcher) {
  std::vector<uint32_t> mask(Matcher::MaskWords(matcher.vocab_size()));
  const absl::Status status = matcher.FillNextTokenBitmask(mask.data());
  EXPECT_TRUE(status.ok()) << status;
  return mask;
}

inline bool IsStop(const GrammarVocabulary& vocabulary, int32_t id) {
  for (int32_t stop : vocabulary.stop_token_ids) {
    if (stop == id) return true;
  }
  return false;
}

struct Walk {
  std::string text;  // the bytes of the accepted tokens, the stop token excluded
  std::vector<int32_t> ids;
  bool terminated = false;
};

// Samples allowed tokens until a stop token is accepted or max_steps pass. For the first
// `free_steps` every allowed token is equally likely; after that the walk heads for the end:
// a stop token when allowed, else a token made only of closing characters ("}]) and quotes),
// else "," or ":", else a random short token that is not only whitespace. Checks at every step
// that the sampled token is accepted, that a disallowed one is refused, and that CanStop agrees
// with the stop bits of the mask.
inline Walk RandomWalk(Matcher& matcher, const GrammarVocabulary& vocabulary, uint32_t seed,
                       int free_steps, int max_steps = 4000) {
  std::mt19937 rng(seed);
  Walk walk;
  auto pick = [&rng](const std::vector<int32_t>& ids) {
    return ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
  };
  auto only = [&vocabulary](int32_t id, const char* chars) {
    const std::string& bytes = vocabulary.token_bytes[id];
    return !bytes.empty() && bytes.find_first_not_of(chars) == std::string::npos;
  };
  for (int step = 0; step < max_steps && !matcher.IsTerminated(); ++step) {
    const std::vector<uint32_t> mask = Mask(matcher);
    const std::vector<int32_t> allowed = AllowedTokens(mask, matcher.vocab_size());
    if (allowed.empty()) {
      ADD_FAILURE() << "seed " << seed << ": no token allowed after \"" << walk.text << "\"";
      return walk;
    }
    bool stop_allowed = false;
    std::vector<int32_t> closing, separators, short_tokens;
    for (int32_t id : allowed) {
      if (IsStop(vocabulary, id)) {
        stop_allowed = true;
        continue;
      }
      if (id >= static_cast<int32_t>(vocabulary.token_bytes.size())) continue;
      if (only(id, "\"}])")) closing.push_back(id);
      if (only(id, ",:")) separators.push_back(id);
      if (vocabulary.token_bytes[id].size() <= 2 && !only(id, " \t\n\r")) {
        short_tokens.push_back(id);
      }
    }
    EXPECT_EQ(stop_allowed, matcher.CanStop()) << "seed " << seed << " after \"" << walk.text;
    int32_t id;
    if (step < free_steps) {
      id = pick(allowed);
    } else if (stop_allowed) {
      id = vocabulary.stop_token_ids[0];
    } else if (!closing.empty()) {
      id = pick(closing);
    } else if (!separators.empty()) {
      id = pick(separators);
    } else if (!short_tokens.empty()) {
      id = pick(short_tokens);
    } else {
      id = pick(allowed);
    }
    // A token the mask refuses must be refused by AcceptToken too (and change nothing).
    const int32_t other = std::uniform_int_distribution<int32_t>(0, matcher.vocab_size() - 1)(rng);
    if (((mask[other / 32] >> (other % 32)) & 1u) == 0) {
      EXPECT_FALSE(matcher.AcceptToken(other)) << "seed " << seed << ": token " << other;
    }
    if (!matcher.AcceptToken(id)) {
      ADD_FAILURE() << "seed " << seed << ": allowed token " << id << " refused after \""
                    << walk.text << "\"";
      return walk;
    }
    walk.ids.push_back(id);
    if (!IsStop(vocabulary, id)) walk.text += vocabulary.token_bytes[id];
  }
  walk.terminated = matcher.IsTerminated();
  return walk;
}

inline std::unique_ptr<Matcher> NewMatcher(GrammarCompiler& compiler,
                                           const Constraint& constraint) {
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
      compiler.Compile(constraint, kCompileTimeout);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Matcher>> matcher = Matcher::Create(*compiled);
  EXPECT_TRUE(matcher.ok()) << matcher.status();
  return matcher.ok() ? std::move(*matcher) : nullptr;
}

}  // namespace kvserve::grammar_test

#endif  // KVSERVE_TESTS_GRAMMAR_GRAMMAR_TEST_UTIL_H_
