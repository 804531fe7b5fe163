// The one conversion between the public API's prompt messages and the prompt renderer's plain
// values (tokenizer/prompt_renderer.h), for the router and the worker alike: a GenerateRequest's
// or TokenizeRequest's text, chat or token ids as a PromptInput, and a TokenizedPrompt as a
// TokenizeResponse. Validation (api/request_validation.h) comes first; these only copy fields.
// Thread-safety: pure functions.
#ifndef KVSERVE_API_PROMPT_CONVERSION_H_
#define KVSERVE_API_PROMPT_CONVERSION_H_

#include "kvserve/v1/generation.pb.h"
#include "tokenizer/prompt_renderer.h"

namespace kvserve {

// The renderer's input: text or chat (with add_special_tokens / add_generation_prompt when set)
// or, for Generate only, token ids.
PromptInput PromptInputOf(const v1::GenerateRequest& request);
PromptInput PromptInputOf(const v1::TokenizeRequest& request);

v1::TokenizeResponse ToTokenizeResponse(TokenizedPrompt tokenized);

}  // namespace kvserve

#endif  // KVSERVE_API_PROMPT_CONVERSION_H_
