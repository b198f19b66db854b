#!/usr/bin/env bash
# Honest memory and hints people can paste (issue 19, item 4): glmc compile
# checks the budget on the final plan (the arena glmc inspect shows, scratch
# included) and prints it per rank; a context beyond max_position_embeddings
# or a plan over budget is refused with commands that, pasted as printed,
# compile (or give the next honest refusal); the plan records the command
# that made it; glm-engine's refusals print re-plan commands that work.
set -euo pipefail
T=${GLM_TEST_TMP:-$(mktemp -d)}
rm -rf "$T" && mkdir -p "$T"
export GLMC_KERNEL_CACHE="$T/kernel-cache"
if ! glmc compile --help >/dev/null 2>&1; then
  echo "glmc was built without MLIR (GLM_WITH_MLIR=OFF): compile tests skipped"
  exit 0
fi
cd "$T" # relative paths: printed commands run from here as pasted
glmc synth --preset tiny --layout exlr8 -o tiny > /dev/null
ls tiny/manifests/exlr8-manifest-mixed.json > /dev/null
ctx_model=$(python3 -c "import json; print(json.load(open('tiny/config.json'))['max_position_embeddings'])")

fail() { echo "compile_hints: $*" >&2; exit 1; }
# Runs a printed command exactly as a shell would after pasting it.
paste_run() { bash -c "$1"; }

# (a) A context beyond the model's max_position_embeddings is refused, with
# two commands: the model's context, or the flag that forces it.
base="glmc compile tiny --manifest mixed --sparks 2 --arch sm_121,sm_90 --no-nvrtc"
if $base --max-context 100000000 -o big.glmplan 2> ctx.txt; then
  fail "--max-context 100000000 above max_position_embeddings $ctx_model was not refused"
fi
cat ctx.txt
grep -q "max_position_embeddings" ctx.txt
grep -q -- "--allow-context-beyond-model" ctx.txt
test ! -e big.glmplan
fix=$(grep -m1 '^  glmc compile' ctx.txt | sed 's/^  //')
[ "$fix" = "$base -o big.glmplan --max-context $ctx_model" ] || fail "unexpected command: $fix"
paste_run "$fix" 2> fix.txt
glmc inspect big.glmplan > big.txt
grep -q "context $ctx_model " big.txt
# (plan records the command that made it; inspect prints it)
grep -qxF "command: $fix" big.txt || { cat big.txt; fail "inspect does not show the command"; }
# The default context is the model's when the model's is smaller than 8192.
glmc compile tiny --manifest mixed --no-nvrtc -o default.glmplan 2> /dev/null
glmc inspect default.glmplan > default.txt
grep -q "context $ctx_model " default.txt

# Forced beyond the model: accepted, and then the budget speaks.
force=$(grep '^  glmc compile' ctx.txt | sed -n 2p | sed 's/^  //')
echo "$force" | grep -q -- "--allow-context-beyond-model"
if paste_run "$force" 2> force.txt; then
  fail "a 100M-token plan was not refused by the 104 GiB budget"
fi
cat force.txt
grep -q "does not fit 104 GiB per Spark" force.txt
grep -Eq "^  rank 0: [0-9.]+ of 104 GiB .*OVER" force.txt

# (b) Every command the budget refusal prints works when pasted: it
# compiles, or it is refused again by the budget (the next honest answer).
n=0; ok=0
while IFS= read -r cmd; do
  n=$((n + 1))
  echo "pasting: $cmd"
  if paste_run "$cmd" 2> pasted.$n.txt; then
    ok=$((ok + 1))
  else
    grep -q "does not fit" pasted.$n.txt || { cat pasted.$n.txt; fail "pasted command failed: $cmd"; }
  fi
done < <(grep '^    glmc compile' force.txt | sed 's/^    //')
[ "$n" -ge 1 ] || fail "the budget refusal printed no command"
[ "$ok" -ge 1 ] || fail "no printed command compiled"
echo "budget refusal: $n commands printed, $ok compiled as pasted"

# (c) The budget is checked on the final plan: a budget just under the
# largest arena inspect shows is refused, one just over it is accepted, and
# the "rank r: X of Y GiB" lines are inspect's figures. (The chunks are
# given: the default ones would be reduced to fit, see (e).)
glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc --memory-per-spark 0 \
  -o free.glmplan 2> free.txt
glmc inspect free.glmplan --format json > free.json
glmc inspect free.glmplan > free.inspect.txt
read -r under over < <(python3 - free.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
a = max(r["memory"]["arena"] for r in d["ranks"])
print(f"{(a - 4096) / 2**30:.12f} {(a + 4096) / 2**30:.12f}")
PY
)
if glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc --memory-per-spark "$under" \
     --prefill-chunks 512,2048 -o under.glmplan 2> under.txt; then
  fail "a budget 4 KiB under the largest arena was accepted"
fi
grep -q "does not fit" under.txt
glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc --memory-per-spark "$over" \
  -o over.glmplan 2> over.txt
cat over.txt
python3 - over.txt free.json free.inspect.txt <<'PY'
import json, re, sys
lines = open(sys.argv[1]).read()
d = json.load(open(sys.argv[2]))
text = open(sys.argv[3]).read()
arena_text = re.findall(r"arena ([0-9.]+ [KMG]?i?B)", text)
found = re.findall(r"^  rank (\d+): ([0-9.]+) of [0-9.e+-]+ GiB \(([0-9.]+ [KMG]?i?B):", lines, re.M)
assert len(found) == len(d["ranks"]) == len(arena_text), (found, arena_text)
for (r, gib, human), rank, at in zip(found, d["ranks"], arena_text):
    arena = rank["memory"]["arena"]
    assert int(r) == rank["rank"], (r, rank["rank"])
    assert abs(float(gib) - arena / 2**30) < 1e-4, (gib, arena)
    assert human == at, (human, at)
print("budget lines match glmc inspect:", [(r, human) for r, _, human in found])
PY

# (d) Smaller prefill chunks: with a budget between the arenas of the
# plan with 16- and 256-token chunks and of the one with 16-token chunks
# only, the refusal offers --prefill-chunks 16, which compiles as pasted.
arena_of() {
  glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc --memory-per-spark 0 \
    --prefill-chunks "$1" -o chunks.glmplan 2> /dev/null
  glmc inspect chunks.glmplan --format json | python3 -c \
    "import json, sys; print(max(r['memory']['arena'] for r in json.load(sys.stdin)['ranks']))"
}
big=$(arena_of 16,256); small=$(arena_of 16)
[ "$small" -lt "$big" ] || fail "16-token chunks take no less memory ($small) than 16,256 ($big)"
mid=$(python3 -c "print(f'{($big + $small) / 2 / 2**30:.12f}')")
chunked="glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc --memory-per-spark $mid --prefill-chunks 16,256 -o mid.glmplan"
if $chunked 2> mid.txt; then
  fail "a budget under the 256-token chunk plan's arena was accepted"
fi
cat mid.txt
grep -q "smaller prefill chunks (at most 16 tokens a chunk)" mid.txt
fix=$(grep -A1 "smaller prefill chunks" mid.txt | sed -n 2p | sed 's/^    //')
[ "$fix" = "glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc --memory-per-spark $mid -o mid.glmplan --prefill-chunks 16" ] \
  || fail "unexpected command: $fix"
paste_run "$fix" 2> /dev/null
glmc inspect mid.glmplan > mid.inspect.txt

# (e) The default chunks (no --prefill-chunks) over the budget: glmc drops
# the largest and compiles with the ones that fit, saying so; the same
# chunks given on the command line are refused as before.
def_arena=$(arena_of 512,2048); small512=$(arena_of 512)
mid=$(python3 -c "print(f'{($def_arena + $small512) / 2 / 2**30:.12f}')")
glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc --memory-per-spark $mid \
  -o auto.glmplan 2> auto.txt || { cat auto.txt; fail "the default chunks were not reduced to fit"; }
cat auto.txt
grep -q "the default prefill chunks 512,2048 do not fit [0-9.]* GiB per Spark; compiling with --prefill-chunks 512 (give --prefill-chunks to choose)" auto.txt \
  || fail "no note of the reduced chunks"
if grep -q "error" auto.txt; then fail "the first try's refusal was printed"; fi
glmc inspect auto.glmplan --format json > auto.json
python3 - auto.json "$small512" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
graphs = [g["name"] for g in d["ranks"][0]["graphs"]]
assert "prefill.512" in graphs and "prefill.2048" not in graphs, graphs
arena = max(r["memory"]["arena"] for r in d["ranks"])
assert arena == int(sys.argv[2]), (arena, sys.argv[2])
PY
if glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc --memory-per-spark $mid \
     --prefill-chunks 512,2048 -o given.glmplan 2> given.txt; then
  fail "chunks given on the command line were changed to fit"
fi
grep -q "smaller prefill chunks (at most 512 tokens a chunk)" given.txt || { cat given.txt; fail "no suggestion"; }

# glm-engine's refusals print re-plan commands that work as pasted.
if command -v glm-engine > /dev/null; then
  glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc --max-context 512 \
    -o run.glmplan 2> /dev/null
  if glm-engine run run.glmplan --pack tiny --backend cpu --tokens 1,2,3 --max-new 2 \
       --greedy --max-context 1024 > /dev/null 2> run.txt; then
    fail "--max-context beyond the plan's was not refused"
  fi
  cat run.txt
  cmd=$(sed -n 's/.*re-plan with: //p' run.txt)
  [ "$cmd" = "glmc compile tiny --manifest mixed --sparks 2 --no-nvrtc -o run.glmplan --max-context 1024" ] \
    || fail "unexpected re-plan command: $cmd"
  paste_run "$cmd" 2> /dev/null
  glm-engine run run.glmplan --pack tiny --backend cpu --tokens 1,2,3 --max-new 2 \
    --greedy --max-context 1024 > run.out
  if glm-engine run run.glmplan --pack tiny --backend cpu --tokens 1,2,3 --max-new 2 \
       --greedy --sparks 1 > /dev/null 2> sparks.txt; then
    fail "--sparks 1 with a 2-Spark plan was not refused"
  fi
  cmd=$(sed -n 's/.*re-plan with: //p' sparks.txt)
  echo "$cmd" | grep -q -- "--manifest mixed" || fail "re-plan drops --manifest: $cmd"
  paste_run "$cmd" 2> /dev/null
  glm-engine run run.glmplan --pack tiny --backend cpu --tokens 1,2,3 --max-new 2 \
    --greedy --sparks 1 > /dev/null
  # Another manifest than the plan's: the re-plan command names it.
  if glm-engine run run.glmplan --pack tiny --manifest k3 --backend cpu --tokens 1,2,3 \
       --max-new 2 --greedy > /dev/null 2> manifest.txt; then
    fail "a plan of another manifest was accepted"
  fi
  cmd=$(sed -n 's/.*re-plan with: //p' manifest.txt)
  echo "$cmd" | grep -q -- "--manifest k3" || fail "re-plan ignores --manifest k3: $cmd"
  paste_run "$cmd" 2> /dev/null
  glm-engine run run.glmplan --pack tiny --manifest k3 --backend cpu --tokens 1,2,3 \
    --max-new 2 --greedy > /dev/null
fi

# Piped progress: lines, never carriage returns.
GLM_PROGRESS=lines glmc compile tiny --manifest mixed --no-nvrtc -o lines.glmplan 2> lines.txt
grep -q "^compile: .*stages (import)" lines.txt
grep -q "^compile: done, 7/7 stages in" lines.txt
if grep -q $'\r' lines.txt; then fail "piped progress drew a bar"; fi
echo "compile_hints: ok"
