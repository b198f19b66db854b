//===- kv_pages_test.cpp - the page pool of a paged KV cache --------------===//
//
// KvPagePool (runtime/exec/kv_pages.h) without a plan: which pages a prompt
// matches, what sharing, release, eviction and the sink do.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/kv_pages.h"

#include "runtime/base/error.h"

#include <gtest/gtest.h>

#include <numeric>

using glm::rt::exec::KvPagePool;

namespace {

std::vector<int64_t> seqOf(int n, int64_t first) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

/// Publishes every full page of `tokens` (as written) in `table`.
void publishAll(KvPagePool &p, const std::vector<int32_t> &table,
                const std::vector<int64_t> &tokens) {
  for (int64_t i = 0; (i + 1) * p.pageTokens() <= int64_t(tokens.size()); ++i)
    p.publish(table, i, tokens);
}

} // namespace

TEST(KvPagePool, PromptsMatchWholePublishedPagesButNeverTheLastToken) {
  KvPagePool p(9, 4, 4); // 8 pages and the sink, tables of 4 (16 tokens)
  EXPECT_EQ(p.capacity(), 8);
  EXPECT_EQ(p.pagesFor(9), 3);
  EXPECT_EQ(p.pagesFor(100), 4); // a table's pages at most
  const std::vector<int64_t> a = seqOf(10, 100);
  const std::vector<int32_t> ta = p.acquire(p.match(a), 3);
  EXPECT_EQ(ta[3], p.sink()); // past the sequence's pages
  EXPECT_TRUE(p.match(a).empty()); // nothing published yet
  publishAll(p, ta, a);            // pages 0 and 1 (tokens 0..7)
  EXPECT_EQ(p.match(a), (std::vector<int32_t>{ta[0], ta[1]}));
  // 8 tokens: only the first page (the last token must run).
  EXPECT_EQ(p.match(seqOf(8, 100)), (std::vector<int32_t>{ta[0]}));
  EXPECT_EQ(p.match(seqOf(4, 100)).size(), 0u);
  // A different second page stops the match after the first.
  std::vector<int64_t> b = seqOf(10, 100);
  b[5] = 7;
  EXPECT_EQ(p.match(b), (std::vector<int32_t>{ta[0]}));
  // The same tokens under another first page are another chain.
  std::vector<int64_t> c = seqOf(10, 100);
  c[0] = 1;
  EXPECT_TRUE(p.match(c).empty());
}

TEST(KvPagePool, SharedPagesStayWhileReferencedAndEvictLeastRecentFirst) {
  KvPagePool p(5, 4, 4); // 4 pages and the sink
  const std::vector<int64_t> a = seqOf(9, 0);
  const std::vector<int32_t> ta = p.acquire({}, 3);
  publishAll(p, ta, a); // pages 0, 1 filed
  EXPECT_EQ(p.inUse(), 3);
  // b shares a's two pages and needs one more of its own.
  const std::vector<int64_t> b = seqOf(12, 0);
  const std::vector<int32_t> mb = p.match(b);
  ASSERT_EQ(mb.size(), 2u);
  EXPECT_TRUE(p.fits(mb, 3));
  EXPECT_FALSE(p.fits({}, 3)); // 1 page left without sharing
  const std::vector<int32_t> tb = p.acquire(mb, 3);
  EXPECT_EQ(tb[0], ta[0]);
  EXPECT_EQ(tb[1], ta[1]);
  EXPECT_EQ(p.inUse(), 4);
  p.release(ta, 3); // a's third page goes free; 0 and 1 stay b's
  EXPECT_EQ(p.inUse(), 3);
  EXPECT_EQ(p.cached(), 0);
  p.release(tb, 3);
  EXPECT_EQ(p.inUse(), 0);
  EXPECT_EQ(p.cached(), 2); // filed, unreferenced
  EXPECT_EQ(p.match(b).size(), 2u);
  // Four new pages: two free, then the two cached ones are evicted; what
  // was filed under them never matches again.
  EXPECT_TRUE(p.fits({}, 4));
  const std::vector<int32_t> td = p.acquire({}, 4);
  EXPECT_EQ(p.cached(), 0);
  EXPECT_TRUE(p.match(b).empty());
  publishAll(p, td, seqOf(16, 50));
  p.release(td, 4);
  EXPECT_EQ(p.match(seqOf(17, 50)).size(), 4u);
  EXPECT_THROW(p.release(td, 4), glm::rt::Error); // released twice
}

TEST(KvPagePool, AnEqualPageFiledFirstWins) {
  KvPagePool p(9, 4, 4);
  const std::vector<int64_t> a = seqOf(9, 0);
  const std::vector<int32_t> t1 = p.acquire({}, 3), t2 = p.acquire({}, 3);
  publishAll(p, t1, a);
  publishAll(p, t2, a); // the same tokens computed again: not filed
  p.release(t1, 3);
  p.release(t2, 3);
  EXPECT_EQ(p.cached(), 2);
  EXPECT_EQ(p.match(a), (std::vector<int32_t>{t1[0], t1[1]}));
}
