//===- serve_ranks.h - `glm-engine serve` as one rank of several ----------===//
//
// A plan of N ranks served by N processes (`glm-engine launch --sparks N
// serve PLAN ...`, or each rank started by hand with --rank/--world/
// --coordinator): rank 0 runs the HTTP server and, before each generation,
// sends the request (prompt ids, sampling state and the grammar spec of a
// constrained request) to the other ranks, which run the same generation in
// lockstep: same logits, same seed and the same token mask built from the
// spec on each rank, so every rank picks the same tokens. After each token rank
// 0 sends whether to go on (a client that disconnected stops every rank at the
// same token); at shutdown it sends a stop. All over the TCP control plane.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/gen/sampler.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace glm::rt {
class Generator;
namespace dist {
class HostComm;
}

/// What rank 0 hands the other ranks: a generation, or the end of serving.
struct RankRequest {
  bool shutdown = false;
  std::vector<int64_t> prompt;
  SamplingParams sampling; // all but `constraint`, which `grammar` makes
  std::string grammar;     // runtime/serve/grammar.h spec; "" = none
  // Rank 0's --draft-tokens (0: --draft none): drafting runs other graphs
  // and collectives, so every rank must draft alike.
  int32_t draftTokens = 0;
};

/// Makes the constraint of a grammar spec (each rank from its tokenizer).
using ConstraintMaker = std::function<ConstraintFactory(const std::string &)>;

std::string encodeRankRequest(const RankRequest &q);
/// Throws Error naming the field when `bytes` is not one encodeRankRequest
/// wrote.
RankRequest decodeRankRequest(const std::string &bytes);

/// Rank 0: sends `q` to every rank (collective: the others are in
/// receiveRankRequest).
void sendRankRequest(dist::HostComm &comm, const RankRequest &q);
/// A rank other than 0: waits for rank 0's next request.
RankRequest receiveRankRequest(dist::HostComm &comm);
/// Every rank, once per generated token: rank 0's `goOn` (the others' is
/// ignored).
bool agreeToContinue(dist::HostComm &comm, bool goOn);

/// A rank other than 0: runs rank 0's generations until it sends a stop;
/// returns 0. Throws Error when rank 0 or a peer fails, or when rank 0
/// drafts otherwise than this rank's `draftTokens` (0: --draft none).
int followRankRequests(dist::HostComm &comm, Generator &generator,
                       const ConstraintMaker &makeConstraint,
                       int32_t draftTokens);

} // namespace glm::rt
