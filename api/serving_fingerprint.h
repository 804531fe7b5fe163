// ServingFingerprint: what must be equal between a router and its workers for cache-aware
// routing to work. The router hashes prompts into block hashes with its own tokenizer and chat
// template and looks them up among the hashes each worker reports; a worker that tokenizes,
// renders or hashes differently reports hashes no prompt of the router ever matches, and
// cache-aware routing silently becomes plain load balancing. So every worker reports its
// fingerprint in ModelInfo and the router refuses a worker whose fingerprint differs from its own.
//
// Each part is a 128-bit digest (HashBlock of kvcache/block_hash.h used as a content hash, so
// every process computes the same value; 32 hex digits):
//   tokenizer      the type and flags, the special ids, every piece with its kind, then the ids
//                  the tokenizer gives a fixed probe text (ASCII, code, accents, CJK, emoji):
//                  merges and pre-tokenization rules show there
//   chat_template  the template text ("" when the model has none)
//   kv_block_size  tokens per block
//   block_hash     the last chained hash of a fixed 64-token sequence at that block size, salt ""
//
// A worker without a tokenizer (a model with none: token-id input only) reports empty tokenizer
// and chat_template parts: everything it serves was tokenized by its clients (through a router,
// by the router), so only the block parts can disagree, and only those are compared.
//
// Thread-safety: pure functions.
#ifndef KVSERVE_API_SERVING_FINGERPRINT_H_
#define KVSERVE_API_SERVING_FINGERPRINT_H_

#include <string>

#include "kvserve/v1/generation.pb.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// `tokenizer` may be null (see above). REQUIRES: block_size > 0.
kvserve::v1::ServingFingerprint ServingFingerprintOf(const Tokenizer* tokenizer, int block_size);

// "" when a worker reporting `theirs` may serve a router whose own is `ours`; otherwise which
// parts differ, e.g. "tokenizer 1a2b... != router's 3c4d...; kv_block_size 32 != router's 16".
// A worker that reports no fingerprint at all (no block size) differs.
std::string FingerprintMismatch(const kvserve::v1::ServingFingerprint& ours,
                                const kvserve::v1::ServingFingerprint& theirs);

// The OpenAI responses' system_fingerprint of a server publishing `info`: "fp_" and 16 hex
// digits of a digest of its serving fingerprint (tokenizer, chat template, block size, block
// hash), model id and architecture. Equal between a router and its workers (the router passes
// on a worker's ModelInfo); it changes when what decides a prompt's tokens or the model does.
std::string SystemFingerprint(const kvserve::v1::ModelInfo& info);

}  // namespace kvserve

#endif  // KVSERVE_API_SERVING_FINGERPRINT_H_
