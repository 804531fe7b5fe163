// DefaultServedModelName: the model id a server publishes (ModelInfo.name, what an OpenAI
// client passes as "model") when it is not given one (kvserve-worker --served_model_name).
// The id comes from the model spec, never from the file's free-text metadata (a GGUF's
// general.name is often a long title with spaces, e.g. "Smollm2 135M 8k Lc100K Mix1 Ep2"):
//   - a .gguf file: its file name without ".gguf", without a trailing shard part
//     ("-00001-of-00003") and without a trailing encoding part after '.' or '-' (F32, F16,
//     BF16, Q8_0, Q4_K_M, IQ4_XS, ...):  SmolLM2-135M-Instruct.Q4_1.gguf -> SmolLM2-135M-Instruct
//   - a Hugging Face directory: its name (/models/Qwen2.5-0.5B-Instruct/ -> Qwen2.5-0.5B-Instruct)
//   - "synthetic:<preset>[:...]": "synthetic-<preset>"
// White space left in the result becomes '-', so the id never holds a space.
//
// Thread-safety: a pure function.
#ifndef KVSERVE_MODEL_SERVED_MODEL_NAME_H_
#define KVSERVE_MODEL_SERVED_MODEL_NAME_H_

#include <string>

#include "absl/strings/string_view.h"

namespace kvserve {

// The default id of the model `spec` names (see above); "" only for an empty spec.
std::string DefaultServedModelName(absl::string_view spec);

// Whether `part` is a GGUF encoding name as file names carry it ("Q4_1", "q8_0", "BF16",
// "Q4_K_M", "IQ4_XS", "TQ1_0"), case-insensitive.
bool IsGgufEncodingName(absl::string_view part);

}  // namespace kvserve

#endif  // KVSERVE_MODEL_SERVED_MODEL_NAME_H_
