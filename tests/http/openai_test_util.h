// Requests and engine messages shared by the tests of the OpenAI mapping and of its responses
// (header-only; a test that includes this links GTest::gmock and kvserve_http).
#ifndef KVSERVE_TESTS_HTTP_OPENAI_TEST_UTIL_H_
#define KVSERVE_TESTS_HTTP_OPENAI_TEST_UTIL_H_

#include <string>

#include "http/openai_mapping.h"
#include "kvserve/v1/output.pb.h"
#include "tests/status_matchers.h"

namespace kvserve::testing {

inline OpenAiMappingOptions Options() {
  OpenAiMappingOptions options;
  options.served_model = "SmolLM2";
  options.aliases = {"smol", "gpt-3.5-turbo"};
  options.max_tokens = 8191;  // the default model's ModelInfo.limits
  options.max_n = 8;
  return options;
}

// A chat request that must parse (an empty request if it does not, after failing the test).
inline OpenAiRequest Chat(const std::string& body,
                          const OpenAiMappingOptions& options = Options()) {
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, body, options);
  KVSERVE_EXPECT_OK(parsed);
  return parsed.ok() ? *parsed : OpenAiRequest();
}

// One engine message: `text` for choice `index` (one token), finishing with `finish`.
inline kvserve::v1::GenerateResponse Delta(int index, const std::string& text,
                                           kvserve::v1::FinishReason finish) {
  kvserve::v1::GenerateResponse response;
  kvserve::v1::ChoiceDelta* delta = response.add_choices();
  delta->set_index(index);
  delta->set_text(text);
  delta->add_token_ids(7);
  delta->set_finish_reason(finish);
  return response;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_HTTP_OPENAI_TEST_UTIL_H_
