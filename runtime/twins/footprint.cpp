//===- footprint.cpp - finding and running a family's footprint -----------===//
#include "runtime/twins/footprint.h"

#include <cstring>

namespace glm::rt::twins {

const FootprintEntry *findFootprint(const std::string &family) {
  for (const FootprintEntry *table : {kCodegenFootprints, kHelperFootprints})
    for (const FootprintEntry *e = table; e->family; ++e)
      if (family == e->family)
        return e;
  return nullptr;
}

const char *ioIndexName(IoIndex what) {
  switch (what) {
  case IoIndex::Slot:
    return "KV slots (io.slots)";
  case IoIndex::Page:
    return "KV pages (io.pages)";
  case IoIndex::Position:
    return "positions (io.positions)";
  case IoIndex::Row:
    return "token ids or draft rows (io.tokens, io.draft_rows)";
  }
  return "?";
}

Footprint footprintOf(const FootprintEntry &e, const Launch &l,
                      const Tables *tables) {
  const size_t n = std::strlen(e.signature);
  check(l.args.size() == n, "footprint of ", e.family, ": ", l.args.size(),
        " arguments, the family takes ", n);
  Footprint f;
  f.bytes.assign(n, 0);
  f.nullable.assign(n, false);
  f.indexed.assign(n, false);
  f.table.assign(n, false);
  f.io.assign(n, false);
  f.kvForm.assign(n, -1);
  f.tables = tables;
  e.fn(l, f);
  f.tables = nullptr;
  return f;
}

} // namespace glm::rt::twins
