//===- kv_pages.h - the page pool of a paged KV cache --------------------===//
//
// A plan compiled with --kv-page-tokens P keeps its latent caches and index
// keys in pages of P token rows (templates/kv_cache.cuh SlotRows); each KV
// slot reads them through its page table (io.pages). This pool decides which
// page holds what, for glm-engine serve:
//  - a sequence holds a reference on every page of its table; it writes only
//    pages it allocated, at positions past what it reused;
//  - once a sequence has written a page's P tokens, publish() files the page
//    under (the page before it, those tokens): a later prompt that begins
//    with the same tokens page by page takes those pages (match, acquire)
//    and skips their prefill. Reuse stops at a page boundary and never
//    takes the prompt's last token (its logits come from running it);
//  - a page no sequence references stays cached until its memory is needed:
//    acquire() evicts the least recently released first. An evicted page's
//    generation changes, so pages filed under it are never matched again;
//  - the last page is the sink: table entries past a sequence's pages name
//    it, so the padding rows of a prefill chunk (positions past the prompt)
//    land there and never in a page someone reads.
// The KV of a reused page came from the run that wrote it: the same bits as
// a cold run where chunked and token-by-token prefill agree bit for bit.
//
// Thread-safety: none; the batching generator holds its lock around calls.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace glm::rt::exec {

class KvPagePool {
public:
  /// `pages` pages of `pageTokens` rows (the last one the sink), tables of
  /// `tablePages` entries (the plan's context / pageTokens).
  KvPagePool(int64_t pages, int64_t pageTokens, int64_t tablePages);

  /// Pages a sequence of `tokens` positions needs.
  int64_t pagesFor(int64_t tokens) const;
  /// The cached pages that begin `prompt`, in order (whole pages, at most
  /// (prompt.size() - 1) / pageTokens of them).
  std::vector<int32_t> match(const std::vector<int64_t> &prompt) const;
  /// Whether acquire(matched, total) can take its pages now.
  bool fits(const std::vector<int32_t> &matched, int64_t total) const;
  /// References `matched` and allocates total - matched.size() more pages
  /// (evicting unreferenced cached pages, least recently used first); the
  /// table: those pages, then the sink. fits() must hold.
  std::vector<int32_t> acquire(const std::vector<int32_t> &matched,
                               int64_t total);
  /// Page `index` of `table` holds tokens [index P, (index + 1) P) of
  /// `tokens` (written): files it for match(), unless an equal page is
  /// filed already.
  void publish(const std::vector<int32_t> &table, int64_t index,
               const std::vector<int64_t> &tokens);
  /// Drops the references of the first `used` pages of `table`.
  void release(const std::vector<int32_t> &table, int64_t used);

  int64_t pageTokens() const { return pageTokens_; }
  /// Pages sequences can hold (all but the sink).
  int64_t capacity() const { return int64_t(pages_.size()) - 1; }
  int64_t inUse() const;  // referenced by a sequence
  int64_t cached() const; // filed and unreferenced (evictable)
  int32_t sink() const { return int32_t(pages_.size()) - 1; }

private:
  struct Page {
    int32_t refs = 0;
    bool filed = false;
    uint64_t gen = 0;     // changes when the page is taken for new rows
    uint64_t lastUse = 0; // release clock: LRU among unreferenced pages
    int32_t parent = -1;  // filed: the page before it (-1: the first)
    uint64_t parentGen = 0;
    std::vector<int64_t> tokens; // filed: its pageTokens tokens
  };
  uint64_t keyOf(int32_t parent, uint64_t parentGen, const int64_t *tokens) const;
  /// The filed page after (parent, parentGen) holding tokens, or -1.
  int32_t find(int32_t parent, uint64_t parentGen, const int64_t *tokens) const;
  void unfile(int32_t page);

  int64_t pageTokens_, tablePages_;
  std::vector<Page> pages_;
  std::vector<int32_t> free_; // unreferenced, unfiled
  std::unordered_multimap<uint64_t, int32_t> filed_;
  uint64_t clock_ = 0;
};

} // namespace glm::rt::exec
