//===- serve_ranks.cpp - `glm-engine serve` as one rank of several --------===//
#include "runtime/engine/serve_ranks.h"

#include "runtime/base/error.h"
#include "runtime/dist/comm.h"
#include "runtime/gen/generator.h"

#include <algorithm>
#include <cstring>

namespace glm::rt {

namespace {

constexpr uint32_t kRequestMagic = 0x51524c47; // "GLRQ"

class Writer {
public:
  template <class T> void put(const T &v) {
    s_.append(reinterpret_cast<const char *>(&v), sizeof v);
  }
  std::string take() { return std::move(s_); }

private:
  std::string s_;
};

class Reader {
public:
  explicit Reader(const std::string &s) : s_(s) {}
  template <class T> T get(const char *what) {
    T v;
    check(at_ + sizeof v <= s_.size(), "rank 0 sent a malformed request (",
          what, " past its end)");
    std::memcpy(&v, s_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  size_t left() const { return s_.size() - at_; }

private:
  const std::string &s_;
  size_t at_ = 0;
};

} // namespace

std::string encodeRankRequest(const RankRequest &q) {
  Writer w;
  const SamplingParams &p = q.sampling;
  w.put(kRequestMagic);
  w.put(uint8_t(q.shutdown));
  w.put(uint64_t(q.prompt.size()));
  for (int64_t t : q.prompt)
    w.put(t);
  w.put(uint8_t(p.greedy));
  w.put(p.temperature);
  w.put(p.topP);
  w.put(p.topK);
  w.put(p.minP);
  w.put(p.repetitionPenalty);
  w.put(p.presencePenalty);
  w.put(p.frequencyPenalty);
  w.put(p.seed);
  w.put(p.maxNew);
  w.put(int32_t(p.topLogprobs));
  w.put(uint64_t(p.stopIds.size()));
  for (int64_t t : p.stopIds)
    w.put(t);
  w.put(uint64_t(q.grammar.size()));
  for (char ch : q.grammar)
    w.put(ch);
  w.put(q.draftTokens);
  return w.take();
}

RankRequest decodeRankRequest(const std::string &bytes) {
  Reader r(bytes);
  check(r.get<uint32_t>("magic") == kRequestMagic,
        "rank 0 sent a malformed request (not a serve request: are all ranks "
        "running `serve`?)");
  RankRequest q;
  q.shutdown = r.get<uint8_t>("shutdown") != 0;
  const uint64_t n = r.get<uint64_t>("prompt length");
  check(n <= r.left() / sizeof(int64_t),
        "rank 0 sent a malformed request (prompt of ", n, " tokens)");
  q.prompt.resize(size_t(n));
  for (int64_t &t : q.prompt)
    t = r.get<int64_t>("prompt");
  SamplingParams &p = q.sampling;
  p.greedy = r.get<uint8_t>("greedy") != 0;
  p.temperature = r.get<double>("temperature");
  p.topP = r.get<double>("top_p");
  p.topK = r.get<int64_t>("top_k");
  p.minP = r.get<double>("min_p");
  p.repetitionPenalty = r.get<double>("repetition_penalty");
  p.presencePenalty = r.get<double>("presence_penalty");
  p.frequencyPenalty = r.get<double>("frequency_penalty");
  p.seed = r.get<uint64_t>("seed");
  p.maxNew = r.get<int64_t>("max_new");
  p.topLogprobs = r.get<int32_t>("top_logprobs");
  const uint64_t stops = r.get<uint64_t>("stop id count");
  check(stops <= r.left() / sizeof(int64_t),
        "rank 0 sent a malformed request (", stops, " stop ids)");
  p.stopIds.resize(size_t(stops));
  for (int64_t &t : p.stopIds)
    t = r.get<int64_t>("stop ids");
  const uint64_t g = r.get<uint64_t>("grammar length");
  check(g <= r.left(), "rank 0 sent a malformed request (grammar of ", g,
        " bytes)");
  q.grammar.resize(size_t(g));
  for (char &ch : q.grammar)
    ch = r.get<char>("grammar");
  q.draftTokens = r.get<int32_t>("draft tokens");
  check(r.left() == 0, "rank 0 sent a malformed request (", r.left(),
        " bytes past its end)");
  return q;
}

namespace {

/// Rank 0's bytes to every rank: the lengths, then the bytes (all-gathers:
/// the control plane's one collective).
std::string fromRankZero(dist::HostComm &comm, const std::string &mine) {
  const int world = comm.size();
  std::vector<uint64_t> sizes(static_cast<size_t>(world));
  const uint64_t mySize = mine.size();
  comm.allGather(&mySize, sizes.data(), sizeof mySize);
  const uint64_t most = *std::max_element(sizes.begin(), sizes.end());
  check(most <= (uint64_t(1) << 32), "a rank sent a request of ", most,
        " bytes");
  std::string padded = mine;
  padded.resize(size_t(most), '\0');
  std::string all(size_t(most * world), '\0');
  if (most)
    comm.allGather(padded.data(), all.data(), size_t(most));
  return all.substr(0, size_t(sizes[0]));
}

} // namespace

void sendRankRequest(dist::HostComm &comm, const RankRequest &q) {
  check(comm.rank() == 0, "only rank 0 sends serve requests");
  fromRankZero(comm, encodeRankRequest(q));
}

RankRequest receiveRankRequest(dist::HostComm &comm) {
  return decodeRankRequest(fromRankZero(comm, std::string()));
}

bool agreeToContinue(dist::HostComm &comm, bool goOn) {
  std::vector<uint8_t> all(size_t(comm.size()));
  const uint8_t mine = goOn;
  comm.allGather(&mine, all.data(), 1);
  return all[0] != 0;
}

int followRankRequests(dist::HostComm &comm, Generator &generator,
                       const ConstraintMaker &makeConstraint,
                       int32_t draftTokens) {
  auto draftText = [](int32_t k) {
    return k ? "--draft mtp --draft-tokens " + std::to_string(k)
             : std::string("--draft none");
  };
  for (;;) {
    RankRequest q = receiveRankRequest(comm);
    if (q.shutdown)
      return 0;
    // Before any step: a rank drafting otherwise would run other graphs
    // and collectives than rank 0 (this rank exits; rank 0 answers 503).
    check(q.draftTokens == draftTokens, "rank ", comm.rank(), " serves with ",
          draftText(draftTokens), " but rank 0 with ",
          draftText(q.draftTokens),
          "; start every rank with the same --draft and --draft-tokens");
    int64_t pos = int64_t(q.prompt.size());
    try {
      if (!q.grammar.empty())
        q.sampling.constraint = makeConstraint(q.grammar);
      generator.generate(q.prompt, q.sampling, [&](int64_t) {
        comm.setStep(pos++);
        return agreeToContinue(comm, true);
      });
    } catch (const Error &) {
      // A request the generator refuses (before any step) is refused on
      // rank 0 alike, which answers the client; a failed peer is not.
      comm.checkHealthy();
    }
  }
}

} // namespace glm::rt
