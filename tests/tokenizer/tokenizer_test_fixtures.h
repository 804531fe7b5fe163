// Test-only helpers shared by the tokenizer, chat template and detokenizer tests: paths of the
// committed fixtures (tests/tokenizer/fixtures/tokenizer_*, written by make_tokenizer_fixtures.py
// with Hugging Face `tokenizers`), a JSON-lines reader, and the default model's tokenizer.
#ifndef KVSERVE_TESTS_TOKENIZER_TOKENIZER_TEST_FIXTURES_H_
#define KVSERVE_TESTS_TOKENIZER_TOKENIZER_TEST_FIXTURES_H_

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/default_model.h"
#include "model/gguf_file.h"
#include "nlohmann/json.hpp"
#include "tests/status_matchers.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::testing {

inline std::string TokenizerFixture(const std::string& name) {
  return std::string(KVSERVE_SOURCE_DIR) + "/tests/tokenizer/fixtures/" + name;
}

// Every line of a JSON-lines fixture; fails the test when the file is missing.
inline std::vector<nlohmann::json> ReadJsonLines(const std::string& name) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(TokenizerFixture(name));
  EXPECT_TRUE(in.good()) << "missing fixture " << TokenizerFixture(name)
                         << " (python3 tests/tokenizer/make_tokenizer_fixtures.py writes it)";
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

// {text, ids, decoded} rows of a token id fixture: the reference's ids for text, and its decode
// of those ids (equal to text except after special tokens in SentencePiece).
struct IdCase {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

inline std::vector<IdCase> ReadIdCases(const std::string& name) {
  std::vector<IdCase> cases;
  for (const nlohmann::json& row : ReadJsonLines(name)) {
    cases.push_back({row["text"].get<std::string>(), row["ids"].get<std::vector<int32_t>>(),
                     row["decoded"].get<std::string>()});
  }
  return cases;
}

// The default model's GGUF; a missing file fails the test (it is not a reason to skip).
inline std::unique_ptr<GgufFile> OpenDefaultModel() {
  const std::string path = DefaultModelPath();
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "default model not found at " << path
                  << "; run scripts/setup.sh (or set KVSERVE_MODEL)";
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(path);
  KVSERVE_EXPECT_OK(gguf);
  return gguf.ok() ? std::move(*gguf) : nullptr;
}

inline std::unique_ptr<Tokenizer> DefaultModelTokenizer() {
  std::unique_ptr<GgufFile> gguf = OpenDefaultModel();
  if (gguf == nullptr) return nullptr;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(*gguf);
  KVSERVE_EXPECT_OK(tokenizer);
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

inline std::unique_ptr<Tokenizer> HfFixtureTokenizer(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::FromHfJson(TokenizerFixture(dir + "/tokenizer.json"));
  KVSERVE_EXPECT_OK(tokenizer);
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

// Printable form of a text for failure messages.
inline std::string Quoted(const std::string& text) { return nlohmann::json(text).dump(); }

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TOKENIZER_TOKENIZER_TEST_FIXTURES_H_
