#include "api/serving_fingerprint.h"

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kvcache/block_hash.h"

namespace kvserve {
namespace {

// Text whose tokens depend on merges and pre-tokenization: words, digits, punctuation, code,
// whitespace runs, accents, CJK and an emoji.
constexpr std::string_view kProbeText =
    "Hello, world! The KV cache holds 12345 tokens; naive/na\xc3\xafve caf\xc3\xa9.\n\n"
    "def f(x):\n    return x ** 2  # squares\n"
    "\xe6\x9d\xb1\xe4\xba\xac \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xf0\x9f\x98\x80 <|end|>";

// A streaming content digest: every Add chains one HashBlock over the bytes.
class Digest {
 public:
  void Add(std::string_view bytes) { hash_ = HashBlock(hash_, {}, bytes); }
  void Add(int64_t value) {
    Add(std::string_view(reinterpret_cast<const char*>(&value), sizeof(value)));
  }
  void Add(absl::Span<const int32_t> ids) { hash_ = HashBlock(hash_, ids, {}); }
  std::string Hex() const { return hash_.ToHex(); }

 private:
  BlockHash hash_;
};

std::string TokenizerDigest(const Tokenizer& tokenizer) {
  Digest digest;
  digest.Add(static_cast<int64_t>(tokenizer.type()));
  for (int64_t flag :
       {int64_t{tokenizer.add_bos_by_default()}, int64_t{tokenizer.strips_leading_space()},
        int64_t{tokenizer.bos_id()}, int64_t{tokenizer.eos_id()}, int64_t{tokenizer.unk_id()},
        int64_t{tokenizer.pad_id()}, int64_t{tokenizer.vocab_size()}}) {
    digest.Add(flag);
  }
  std::string pieces;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    absl::StrAppend(&pieces, static_cast<int>(tokenizer.Kind(id)), ":");
    pieces += tokenizer.IdToPiece(id);
    pieces.push_back('\0');
    if (pieces.size() >= 1 << 16) {  // bounded chunks
      digest.Add(pieces);
      pieces.clear();
    }
  }
  digest.Add(pieces);
  digest.Add(tokenizer.Encode(kProbeText, /*add_bos=*/false));
  return digest.Hex();
}

std::string BlockHashDigest(int block_size) {
  std::vector<TokenId> tokens(64);
  for (int i = 0; i < 64; ++i) tokens[i] = i * 7919 + 1;
  std::vector<BlockHash> hashes;
  HashFullBlocks(tokens, block_size, /*cache_salt=*/"", &hashes);
  return hashes.empty() ? BlockHash{}.ToHex() : hashes.back().ToHex();
}

void CompareField(std::string_view name, const std::string& ours, const std::string& theirs,
                  std::string* out) {
  if (ours == theirs) return;
  absl::StrAppend(out, out->empty() ? "" : "; ", absl::string_view(name.data(), name.size()), " ",
                  theirs.empty() ? "(none)" : theirs, " != router's ", ours);
}

}  // namespace

v1::ServingFingerprint ServingFingerprintOf(const Tokenizer* tokenizer, int block_size) {
  v1::ServingFingerprint fingerprint;
  if (tokenizer != nullptr) {
    fingerprint.set_tokenizer(TokenizerDigest(*tokenizer));
    Digest chat_template;
    chat_template.Add(tokenizer->chat_template());
    fingerprint.set_chat_template(chat_template.Hex());
  }
  fingerprint.set_kv_block_size(block_size);
  fingerprint.set_block_hash(BlockHashDigest(block_size));
  return fingerprint;
}

std::string FingerprintMismatch(const v1::ServingFingerprint& ours,
                                const v1::ServingFingerprint& theirs) {
  std::string mismatch;
  if (!theirs.tokenizer().empty()) {  // a worker without a tokenizer serves token ids only
    CompareField("tokenizer", ours.tokenizer(), theirs.tokenizer(), &mismatch);
    CompareField("chat_template", ours.chat_template(), theirs.chat_template(), &mismatch);
  }
  if (ours.kv_block_size() != theirs.kv_block_size()) {
    absl::StrAppend(&mismatch, mismatch.empty() ? "" : "; ", "kv_block_size ",
                    theirs.kv_block_size(), " != router's ", ours.kv_block_size());
  }
  CompareField("block_hash", ours.block_hash(), theirs.block_hash(), &mismatch);
  return mismatch;
}

std::string SystemFingerprint(const v1::ModelInfo& info) {
  const v1::ServingFingerprint& fingerprint = info.fingerprint();
  Digest digest;
  for (const std::string& part : {fingerprint.tokenizer(), fingerprint.chat_template(),
                                  fingerprint.block_hash(), info.name(), info.architecture()}) {
    digest.Add(part);
  }
  digest.Add(int64_t{fingerprint.kv_block_size()});
  return absl::StrCat("fp_", digest.Hex().substr(0, 16));
}

}  // namespace kvserve
