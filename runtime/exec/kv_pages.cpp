//===- kv_pages.cpp - the page pool of a paged KV cache ------------------===//
#include "runtime/exec/kv_pages.h"

#include "runtime/base/error.h"

#include <algorithm>

namespace glm::rt::exec {

KvPagePool::KvPagePool(int64_t pages, int64_t pageTokens, int64_t tablePages)
    : pageTokens_(pageTokens), tablePages_(tablePages) {
  check(pages >= 2 && pageTokens >= 1 && tablePages >= 1,
        "KV page pool: ", pages, " pages of ", pageTokens,
        " tokens (at least one page and the sink)");
  pages_.resize(size_t(pages));
  // Allocation order: page 0 first (a lone sequence gets today's layout).
  for (int64_t p = pages - 2; p >= 0; --p)
    free_.push_back(int32_t(p));
}

int64_t KvPagePool::pagesFor(int64_t tokens) const {
  return std::min(tablePages_, (tokens + pageTokens_ - 1) / pageTokens_);
}

uint64_t KvPagePool::keyOf(int32_t parent, uint64_t parentGen,
                           const int64_t *tokens) const {
  // FNV-1a over the words; find() compares the page itself.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(uint64_t(int64_t(parent)));
  mix(parentGen);
  for (int64_t i = 0; i < pageTokens_; ++i)
    mix(uint64_t(tokens[i]));
  return h;
}

int32_t KvPagePool::find(int32_t parent, uint64_t parentGen,
                         const int64_t *tokens) const {
  auto [b, e] = filed_.equal_range(keyOf(parent, parentGen, tokens));
  for (auto it = b; it != e; ++it) {
    const Page &p = pages_[size_t(it->second)];
    if (p.filed && p.parent == parent && p.parentGen == parentGen &&
        std::equal(p.tokens.begin(), p.tokens.end(), tokens))
      return it->second;
  }
  return -1;
}

std::vector<int32_t>
KvPagePool::match(const std::vector<int64_t> &prompt) const {
  std::vector<int32_t> run;
  if (prompt.empty())
    return run;
  const int64_t most =
      std::min<int64_t>(tablePages_, int64_t(prompt.size() - 1) / pageTokens_);
  int32_t parent = -1;
  uint64_t gen = 0;
  for (int64_t i = 0; i < most; ++i) {
    const int32_t p = find(parent, gen, prompt.data() + i * pageTokens_);
    if (p < 0)
      break;
    run.push_back(p);
    parent = p;
    gen = pages_[size_t(p)].gen;
  }
  return run;
}

bool KvPagePool::fits(const std::vector<int32_t> &matched,
                      int64_t total) const {
  int64_t need = total - int64_t(matched.size());
  if (need <= int64_t(free_.size()))
    return true;
  need -= int64_t(free_.size());
  // Unreferenced filed pages can be evicted, except the ones taken here.
  for (size_t p = 0; p + 1 < pages_.size() && need > 0; ++p)
    if (pages_[p].filed && pages_[p].refs == 0 &&
        std::find(matched.begin(), matched.end(), int32_t(p)) ==
            matched.end())
      --need;
  return need <= 0;
}

void KvPagePool::unfile(int32_t page) {
  Page &p = pages_[size_t(page)];
  auto [b, e] = filed_.equal_range(keyOf(p.parent, p.parentGen,
                                         p.tokens.data()));
  for (auto it = b; it != e; ++it)
    if (it->second == page) {
      filed_.erase(it);
      break;
    }
  p.filed = false;
  p.tokens.clear();
}

std::vector<int32_t> KvPagePool::acquire(const std::vector<int32_t> &matched,
                                         int64_t total) {
  check(fits(matched, total), "KV page pool: acquire() without room "
        "(internal)");
  std::vector<int32_t> table(size_t(tablePages_), sink());
  for (size_t i = 0; i < matched.size(); ++i) {
    ++pages_[size_t(matched[i])].refs;
    table[i] = matched[i];
  }
  for (int64_t i = int64_t(matched.size()); i < total; ++i) {
    int32_t p = -1;
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    } else {
      // The least recently released unreferenced filed page.
      for (size_t q = 0; q + 1 < pages_.size(); ++q)
        if (pages_[q].filed && pages_[q].refs == 0 &&
            (p < 0 || pages_[q].lastUse < pages_[size_t(p)].lastUse))
          p = int32_t(q);
      unfile(p);
    }
    Page &pg = pages_[size_t(p)];
    ++pg.gen; // what was filed under it no longer follows it
    pg.refs = 1;
    table[size_t(i)] = p;
  }
  return table;
}

void KvPagePool::publish(const std::vector<int32_t> &table, int64_t index,
                         const std::vector<int64_t> &tokens) {
  check(index >= 0 && index < tablePages_ &&
            int64_t(tokens.size()) >= (index + 1) * pageTokens_,
        "KV page pool: publishing page ", index, " of ", tokens.size(),
        " tokens (internal)");
  const int32_t page = table[size_t(index)];
  Page &p = pages_[size_t(page)];
  if (page == sink() || p.filed)
    return;
  const int32_t parent = index ? table[size_t(index - 1)] : -1;
  // Only under a filed parent: else no match() reaches it.
  if (parent >= 0 && !pages_[size_t(parent)].filed)
    return;
  const uint64_t parentGen = parent >= 0 ? pages_[size_t(parent)].gen : 0;
  const int64_t *first = tokens.data() + index * pageTokens_;
  if (find(parent, parentGen, first) >= 0)
    return; // another sequence filed the same tokens first
  p.filed = true;
  p.parent = parent;
  p.parentGen = parentGen;
  p.tokens.assign(first, first + pageTokens_);
  filed_.emplace(keyOf(parent, parentGen, first), page);
}

void KvPagePool::release(const std::vector<int32_t> &table, int64_t used) {
  ++clock_;
  for (int64_t i = 0; i < used && i < int64_t(table.size()); ++i) {
    const int32_t page = table[size_t(i)];
    if (page == sink())
      continue;
    Page &p = pages_[size_t(page)];
    check(p.refs > 0, "KV page pool: page ", page, " released twice "
          "(internal)");
    if (--p.refs == 0) {
      p.lastUse = clock_;
      if (!p.filed)
        free_.push_back(page);
    }
  }
}

int64_t KvPagePool::inUse() const {
  int64_t n = 0;
  for (size_t p = 0; p + 1 < pages_.size(); ++p)
    n += pages_[p].refs > 0;
  return n;
}

int64_t KvPagePool::cached() const {
  int64_t n = 0;
  for (size_t p = 0; p + 1 < pages_.size(); ++p)
    n += pages_[p].filed && pages_[p].refs == 0;
  return n;
}

} // namespace glm::rt::exec
