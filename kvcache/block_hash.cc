#include "kvcache/block_hash.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace kvserve {

static_assert(std::endian::native == std::endian::little,
              "the block hash encoding is defined on little-endian hosts");
static_assert(sizeof(TokenId) == 4, "token ids are hashed as int32");

namespace {

// Most blocks (up to 256 tokens with a short salt) fit this buffer and hash in one shot; longer
// inputs stream the same bytes, which XXH3 hashes to the same value.
constexpr size_t kOneShotBytes = 1280;

BlockHash FromXxh(XXH128_hash_t h) { return BlockHash{h.low64, h.high64}; }

}  // namespace

std::string BlockHash::ToHex() const { return absl::StrFormat("%016x%016x", high, low); }

BlockHash HashBlock(const BlockHash& parent, absl::Span<const TokenId> tokens,
                    std::string_view extra_keys) {
  const size_t token_bytes = tokens.size() * sizeof(TokenId);
  const uint64_t extra_length = extra_keys.size();
  const size_t total = 2 * sizeof(uint64_t) + token_bytes + extra_keys.size() + sizeof(uint64_t);
  if (total <= kOneShotBytes) {
    alignas(8) unsigned char buffer[kOneShotBytes];
    unsigned char* out = buffer;
    std::memcpy(out, &parent.low, sizeof(uint64_t));
    out += sizeof(uint64_t);
    std::memcpy(out, &parent.high, sizeof(uint64_t));
    out += sizeof(uint64_t);
    if (token_bytes > 0) std::memcpy(out, tokens.data(), token_bytes);
    out += token_bytes;
    if (!extra_keys.empty()) std::memcpy(out, extra_keys.data(), extra_keys.size());
    out += extra_keys.size();
    std::memcpy(out, &extra_length, sizeof(uint64_t));
    return FromXxh(XXH3_128bits(buffer, total));
  }
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  XXH3_128bits_update(&state, &parent.low, sizeof(uint64_t));
  XXH3_128bits_update(&state, &parent.high, sizeof(uint64_t));
  XXH3_128bits_update(&state, tokens.data(), token_bytes);
  XXH3_128bits_update(&state, extra_keys.data(), extra_keys.size());
  XXH3_128bits_update(&state, &extra_length, sizeof(uint64_t));
  return FromXxh(XXH3_128bits_digest(&state));
}

void HashFullBlocks(absl::Span<const TokenId> tokens, int block_size, std::string_view cache_salt,
                    std::vector<BlockHash>* hashes) {
  const size_t num_full = tokens.size() / static_cast<size_t>(block_size);
  BlockHash parent;
  for (size_t i = 0; i < num_full; ++i) {
    parent = HashBlock(parent, tokens.subspan(i * block_size, block_size),
                       i == 0 ? cache_salt : std::string_view());
    hashes->push_back(parent);
  }
}

}  // namespace kvserve
