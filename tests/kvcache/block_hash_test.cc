#include "kvcache/block_hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <string>
#include <vector>

namespace kvserve {
namespace {

std::vector<TokenId> Range(int count, TokenId first) {
  std::vector<TokenId> tokens(count);
  for (int i = 0; i < count; ++i) tokens[i] = first + i;
  return tokens;
}

// The encoding written in block_hash.h, built by hand: the router depends on it.
BlockHash Reference(const BlockHash& parent, const std::vector<TokenId>& tokens,
                    const std::string& extra) {
  std::string bytes;
  bytes.append(reinterpret_cast<const char*>(&parent.low), 8);
  bytes.append(reinterpret_cast<const char*>(&parent.high), 8);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  bytes.append(extra);
  const uint64_t length = extra.size();
  bytes.append(reinterpret_cast<const char*>(&length), 8);
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return BlockHash{h.low64, h.high64};
}

TEST(BlockHashTest, MatchesTheDocumentedEncoding) {
  const BlockHash parent{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  const std::vector<TokenId> tokens = Range(16, 100);
  EXPECT_EQ(HashBlock(parent, tokens, ""), Reference(parent, tokens, ""));
  EXPECT_EQ(HashBlock(parent, tokens, "tenant"), Reference(parent, tokens, "tenant"));
}

TEST(BlockHashTest, LongInputsTakeTheStreamingPathAndHashTheSameBytes) {
  const std::vector<TokenId> tokens = Range(256, 7);  // 1 KiB of tokens
  const std::string salt(700, 's');                   // pushes past the one-shot buffer
  EXPECT_EQ(HashBlock(BlockHash{}, tokens, salt), Reference(BlockHash{}, tokens, salt));
}

TEST(BlockHashTest, EveryInputChangesTheHash) {
  const std::vector<TokenId> tokens = Range(16, 0);
  const BlockHash base = HashBlock(BlockHash{}, tokens, "");
  EXPECT_EQ(base, HashBlock(BlockHash{}, tokens, ""));
  EXPECT_NE(base, HashBlock(BlockHash{1, 0}, tokens, ""));
  std::vector<TokenId> changed = tokens;
  changed[15] = 99;
  EXPECT_NE(base, HashBlock(BlockHash{}, changed, ""));
  EXPECT_NE(base, HashBlock(BlockHash{}, tokens, "salt"));
  // Extra keys are length-delimited: moving bytes between tokens and keys cannot collide.
  EXPECT_NE(HashBlock(BlockHash{}, Range(1, 0), ""),
            HashBlock(BlockHash{}, {}, std::string(4, '\0')));
}

TEST(BlockHashTest, FullBlocksChainAndIgnoreThePartialTail) {
  const std::vector<TokenId> tokens = Range(40, 3);
  std::vector<BlockHash> hashes = {BlockHash{9, 9}};  // appended to, not cleared
  HashFullBlocks(tokens, 16, "salt", &hashes);
  ASSERT_EQ(hashes.size(), 3u);
  const BlockHash first =
      HashBlock(BlockHash{}, absl::MakeConstSpan(tokens).subspan(0, 16), "salt");
  EXPECT_EQ(hashes[1], first);
  EXPECT_EQ(hashes[2], HashBlock(first, absl::MakeConstSpan(tokens).subspan(16, 16), ""));
}

TEST(BlockHashTest, SaltChangesEveryBlockOfThePrefix) {
  const std::vector<TokenId> tokens = Range(64, 0);
  std::vector<BlockHash> plain, salted;
  HashFullBlocks(tokens, 16, "", &plain);
  HashFullBlocks(tokens, 16, "tenant-a", &salted);
  ASSERT_EQ(plain.size(), 4u);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NE(plain[i], salted[i]) << i;
}

TEST(BlockHashTest, EqualPrefixesShareHashesUntilTheyDiverge) {
  std::vector<TokenId> a = Range(48, 0);
  std::vector<TokenId> b = a;
  b[20] = -5;
  std::vector<BlockHash> ha, hb;
  HashFullBlocks(a, 16, "", &ha);
  HashFullBlocks(b, 16, "", &hb);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);  // same tokens in block 2, different parent
}

TEST(BlockHashTest, ToHexPrintsHighHalfFirst) {
  EXPECT_EQ((BlockHash{0x1, 0xab}.ToHex()), "00000000000000ab0000000000000001");
}

}  // namespace
}  // namespace kvserve
