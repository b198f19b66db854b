#!/usr/bin/env python3
"""Times exllamav3's batch-1 MoE path on GLM-5.3 expert shapes (H200 baseline).

GLM-5.3 MoE layer: hidden 6144, expert intermediate 2048, 256 routed experts,
top-8, one shared expert. Random trellis words (every bit pattern is a valid
EXL3 tile), random sign/scale vectors, random routing over all 256 experts.
What is timed, each a CUDA graph over NSTEP distinct expert selections (so the
L2 does not serve the weights), median of many replays after warm-up:

  coop routed   exl3_moe_coop on the 8 routed experts: exllamav3 1.6's batch-1
                path (BC_BlockSparseMLP.run_bszN): 2 launches, the 24 matrices
  coop layer    the shared expert as its own one-expert coop launch, then the
                routed launch merging it, as run_bszN does with sh_coop: 4
                launches (the routing GEMV/top-k before it is not included)
  mgemm routed  (if exl3_mgemm.so was built) the older path: exl3_mgemm gate,
                exl3_mgemm up, silu_mul, exl3_mgemm down with the weighted
                reduction: 3 multi-matrix launches + the activation
  cuBLAS fp16   torch.matmul on the same 24 matrices as dense fp16 (24
                launches), and as 2 torch.bmm launches

Fractions are weight bytes / time / copy bandwidth, the copy bandwidth being a
torch device-to-device copy timed in the same process (bytes read + written).
With --ours FILE (glm-engine bench --table output) the table also lists our
routed experts (--suite expert, b1) and layer experts (--suite moe-layer,
"experts only", incl. the shared expert) and the speed-up exl3 / ours.

Usage: bench.py [--ext-dir .exl3-build] [--ours bench-table.txt]
                [--table OUT] [--ks 2,3,4] [--cbs mcg,mul1,3inst]
"""

import argparse
import importlib.util
import os
import statistics
import sys

import torch

H, I, E, TOPK = 6144, 2048, 256, 8
MAX_BSZN = 8          # exllamav3's bsz <= 8 decode tier (scratch sizing)
NSTEP = 16            # distinct selections per graph
CB_NAMES = {"3inst": (False, False), "mcg": (True, False), "mul1": (False, True)}
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def loadExt(extDir, name):
    """Imports NAME.so from extDir (reassembling NAME.so.part* if split)."""
    so = os.path.join(extDir, name + ".so")
    parts = sorted(p for p in os.listdir(extDir) if p.startswith(name + ".so.part")) \
        if os.path.isdir(extDir) else []
    if not os.path.exists(so) and parts:
        with open(so + ".tmp", "wb") as f:
            for p in parts:
                with open(os.path.join(extDir, p), "rb") as g:
                    f.write(g.read())
        os.replace(so + ".tmp", so)
    if not os.path.exists(so):
        return None
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timeGraph(fn, reps, pre=2, warm=5):
    """Median ms of one replay of a graph capturing fn(), after pre plain
    calls (autotuners settle there); falls back to timing fn() on the stream
    if it cannot be captured. Returns (ms, mode)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(pre):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    run, mode = fn, "stream"
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        run, mode = g.replay, "graph"
    except Exception as ex:  # say so; the stream time is still a time
        print(f"exl3 bench: graph capture failed ({ex}); timing the stream", flush=True)
        torch.cuda.synchronize()
    for _ in range(warm):
        run()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts), mode


def copyBandwidth(reps):
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ms = statistics.median(ts)
    del src, dst
    return 2.0 * n / (ms * 1e-3) / 1e9


class Proj:
    """One projection (gate, up or down) of n experts: trellis words,
    input/output sign-scale vectors and the int64 pointer tables."""

    def __init__(self, n, k, nOut, K, gen):
        dev = "cuda"
        self.trellis = torch.randint(-32768, 32767, (n, k // 16, nOut // 16, 16 * K),
                                     dtype=torch.int16, device=dev, generator=gen)
        sign = lambda *s: (torch.randint(0, 2, s, device=dev, generator=gen) * 2 - 1).half()
        self.suh = sign(n, k)
        # Output scale keeps activations in fp16 range (values do not change
        # the timing; they only keep the sanity checks meaningful).
        self.svh = sign(n, nOut) * (1.0 / (k ** 0.5))
        self.t = self.table(self.trellis)
        self.s = self.table(self.suh)
        self.v = self.table(self.svh)

    @staticmethod
    def table(x):
        step = x[0].numel() * x.element_size()
        base = x.data_ptr()
        return torch.tensor([base + i * step for i in range(x.shape[0])],
                            dtype=torch.long, device="cuda")


class Coop:
    """Scratch and calls of exl3_moe_coop sized as BlockSparseMLP sizes them
    (MAX_BSZN * top-k slots; the shared expert MAX_BSZN slots)."""

    def __init__(self, ext, K, cb, routed, shared):
        self.ext, self.K, (self.mcg, self.mul1) = ext, K, CB_NAMES[cb]
        self.r, self.sh = routed, shared
        hf = dict(dtype=torch.half, device="cuda")
        ff = dict(dtype=torch.float, device="cuda")
        slots = MAX_BSZN * TOPK
        self.had_g = torch.empty(slots, 1, H, **hf)
        self.had_u = torch.empty(slots, H, **hf)
        self.gu_g = torch.empty(slots, 1, I, **hf)
        self.gu_u = torch.empty(slots, 1, I, **hf)
        self.act = torch.empty(slots, 1, I, **hf)
        self.d_out = torch.empty(slots, 1, H, **ff)
        self.ctr = torch.zeros(ext.ctr_len(slots, MAX_BSZN, I, H), dtype=torch.int, device="cuda")
        self.out = torch.empty(MAX_BSZN, H, **ff)
        self.s_had_g = torch.empty(MAX_BSZN, H, **hf)
        self.s_had_u = torch.empty(MAX_BSZN, H, **hf)
        self.s_gu_g = torch.empty(MAX_BSZN, I, **hf)
        self.s_gu_u = torch.empty(MAX_BSZN, I, **hf)
        self.s_act = torch.empty(MAX_BSZN, I, **hf)
        self.s_d_out = torch.empty(MAX_BSZN, H, **ff)
        self.s_ctr = torch.zeros(ext.ctr_len(MAX_BSZN, MAX_BSZN, I, H), dtype=torch.int, device="cuda")
        self.s_out = torch.empty(1, MAX_BSZN, H, **ff)
        self.s_sel = torch.zeros(MAX_BSZN, 1, dtype=torch.long, device="cuda")
        self.s_rw = torch.ones(MAX_BSZN, 1, **hf)

    def routed(self, x, sel, rw, shOut=None):
        g, u, d = self.r
        K = float(self.K)
        self.ext.exl3_moe_coop(
            x, sel, rw, -1, -1, H, g.t, g.s, g.v, u.t, u.s, u.v, d.t, d.s, d.v,
            None, None, None, K, K, K, self.mcg, self.mul1, 0, 0.0, True,
            self.had_g, self.had_u, self.gu_g, self.gu_u, self.act, self.d_out,
            self.ctr, self.out, shOut, None)
        return self.out[:1]

    def layer(self, x, sel, rw):
        g, u, d = self.sh
        K = float(self.K)
        self.ext.exl3_moe_coop(
            x, self.s_sel[:1], self.s_rw[:1], -1, -1, H, g.t, g.s, g.v, u.t,
            u.s, u.v, d.t, d.s, d.v, None, None, None, K, K, K, self.mcg,
            self.mul1, 0, 0.0, True, self.s_had_g, self.s_had_u, self.s_gu_g,
            self.s_gu_u, self.s_act, self.s_d_out, self.s_ctr, self.s_out,
            None, None)
        return self.routed(x, sel, rw, self.s_out[:, :1])


class Mgemm:
    """The three multi-matrix launches (+ silu_mul) of the older path."""

    def __init__(self, ext, K, cb, routed):
        self.ext, self.K, (self.mcg, self.mul1) = ext, K, CB_NAMES[cb]
        self.r = routed
        hf = dict(dtype=torch.half, device="cuda")
        self.xh = torch.empty(TOPK, 1, H, **hf)
        self.g = torch.empty(TOPK, 1, I, **hf)
        self.u = torch.empty(TOPK, 1, I, **hf)
        self.a = torch.empty(TOPK, 1, I, **hf)
        self.ah = torch.empty(TOPK, 1, I, **hf)
        self.o = torch.empty(TOPK, 1, H, dtype=torch.float, device="cuda")

    def routed(self, x, sel, rw):
        g, u, d = self.r
        K = float(self.K)
        x3 = x.view(1, 1, H)
        e = self.ext
        e.exl3_mgemm(x3, g.t, self.g, g.s, self.xh, g.v, sel, None, K, -1,
                     self.mcg, self.mul1, -1, -1, 0)
        e.exl3_mgemm(x3, u.t, self.u, u.s, self.xh, u.v, sel, None, K, -1,
                     self.mcg, self.mul1, -1, -1, 0)
        e.silu_mul(self.g, self.u, self.a, 0.0)
        e.exl3_mgemm(self.a, d.t, self.o, d.s, self.ah, d.v, sel, rw, K, -1,
                     self.mcg, self.mul1, -1, -1, 0)
        return self.o[0]


def readOurs(path):
    """{(suite, name): (us, fraction)} from a glm-engine bench table."""
    rows = {}
    if not path or not os.path.exists(path):
        return rows
    for line in open(path):
        f = line.split()
        if len(f) < 6 or f[0] == "suite":
            continue
        try:
            us, frac = float(f[-4]), float(f[-1])
        except ValueError:
            continue
        rows[(f[0], " ".join(f[1:-4]))] = (us, frac)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ext-dir", default=os.path.join(ROOT, ".exl3-build"))
    ap.add_argument("--ours", help="glm-engine bench --table file to compare")
    ap.add_argument("--table", help="also write the table here")
    ap.add_argument("--ks", default="2,3,4")
    ap.add_argument("--cbs", default="mcg,mul1,3inst")
    ap.add_argument("--reps", type=int, default=60)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("exl3 bench: no CUDA device")
    coop = loadExt(a.ext_dir, "exl3_coop")
    if coop is None:
        raise SystemExit(f"exl3 bench: no exl3_coop.so in {a.ext_dir}; run build.py")
    mg = None
    try:
        mg = loadExt(a.ext_dir, "exl3_mgemm")
    except Exception as ex:  # optional module; say why it is missing
        print(f"exl3 bench: exl3_mgemm.so not usable: {ex}", flush=True)
    torch.manual_seed(0)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    dev = torch.cuda.get_device_name()
    bw = copyBandwidth(20)
    print(f"exl3 bench: {dev}, copy {bw:.0f} GB/s (read+write, 1 GiB)", flush=True)

    x = (torch.randn(1, H, device="cuda", generator=gen) * 0.5).half()
    sels = [torch.randperm(E, device="cuda", generator=gen)[:TOPK].view(1, TOPK)
            for _ in range(NSTEP)]
    rws = []
    for _ in range(NSTEP):
        w = torch.rand(1, TOPK, device="cuda", generator=gen) + 0.1
        rws.append((w / w.sum() * 2.5).half())
    ours = readOurs(a.ours)
    rows, checks = [], []
    cbs = [c for c in a.cbs.split(",") if c]
    for K in [int(k) for k in a.ks.split(",")]:
        routed = [Proj(E, H, I, K, gen), Proj(E, H, I, K, gen), Proj(E, I, H, K, gen)]
        shared = [Proj(1, H, I, K, gen), Proj(1, H, I, K, gen), Proj(1, I, H, K, gen)]
        mb24 = 24 * H * I * K / 8 / 1e6
        mb27 = 27 * H * I * K / 8 / 1e6
        for cb in cbs:
            c = Coop(coop, K, cb, routed, shared)
            # Sanity: finite, selection-dependent, deterministic.
            o1 = c.routed(x, sels[0], rws[0]).clone()
            o2 = c.routed(x, sels[1], rws[1]).clone()
            o3 = c.routed(x, sels[0], rws[0]).clone()
            ok = bool(torch.isfinite(o1).all()) and not torch.equal(o1, o2) \
                and torch.equal(o1, o3) and float(o1.abs().max()) > 0
            chk = f"K{K} {cb}: coop finite/deterministic/selection-dependent {'ok' if ok else 'FAIL'}"
            t_r, md = timeGraph(lambda: [c.routed(x, s, w) for s, w in zip(sels, rws)], a.reps)
            t_r /= NSTEP
            t_l, md2 = timeGraph(lambda: [c.layer(x, s, w) for s, w in zip(sels, rws)], a.reps)
            t_l /= NSTEP
            chk += f" (timed: {md}/{md2})"
            t_m = None
            if mg is not None:
                m = Mgemm(mg, K, cb, routed)
                om = m.routed(x, sels[0], rws[0]).clone()
                rel = float((om - o1).norm() / o1.norm())
                chk += f"; mgemm vs coop rel diff {rel:.2e} {'ok' if rel < 1e-2 else 'FAIL'}"
                t_m, md3 = timeGraph(lambda: [m.routed(x, s, w) for s, w in zip(sels, rws)], a.reps, pre=20)
                t_m /= NSTEP
                chk += f" (mgemm timed: {md3})"
                del m
            checks.append(chk)
            print(chk, flush=True)
            rows.append((K, cb, mb24, mb27, t_r * 1e3, t_l * 1e3,
                         None if t_m is None else t_m * 1e3))
            del c
        del routed, shared
        torch.cuda.empty_cache()

    # Dense fp16 cuBLAS on the same 24 matrices (gate, up: 6144x2048; down:
    # 2048x6144) for 8 experts.
    Wgu = [torch.randn(H, I, device="cuda", generator=gen).half() * 0.01 for _ in range(16)]
    Wd = [torch.randn(I, H, device="cuda", generator=gen).half() * 0.01 for _ in range(8)]
    a1 = torch.randn(1, I, device="cuda", generator=gen).half()
    outs = [None] * 24

    def dense24():
        for i in range(16):
            outs[i] = torch.matmul(x, Wgu[i])
        for i in range(8):
            outs[16 + i] = torch.matmul(a1, Wd[i])
    t_d, _ = timeGraph(dense24, a.reps)
    Wgu_b = torch.stack(Wgu)
    Wd_b = torch.stack(Wd)
    del Wgu, Wd
    xb = x.view(1, 1, H).expand(16, 1, H)
    ab = a1.view(1, 1, I).expand(8, 1, I)
    t_b, _ = timeGraph(lambda: (torch.bmm(xb, Wgu_b), torch.bmm(ab, Wd_b)), a.reps)
    mbd = 24 * H * I * 2 / 1e6

    frac = lambda mb, us: mb * 1e6 / (us * 1e-6) / (bw * 1e9)
    out = []
    out.append(f"exllamav3 1.6.5 batch-1 MoE, GLM-5.3 6144<->2048, 8 of 256 experts (+1 shared), "
               f"{dev}, copy {bw:.0f} GB/s")
    out.append("fraction = weight bytes / time / copy bandwidth; speed-up = exl3 us / ours us "
               "(ours from glm-engine bench in the same run; - = not in it)")
    hdr = (f"{'K':<3}{'cb':<6}{'MB24':>7}{'coop routed us':>16}{'frac':>7}"
           f"{'coop layer us':>15}{'frac':>7}{'mgemm us':>10}"
           f"{'ours routed':>13}{'x':>6}{'ours exp+sh':>12}{'x':>6}")
    out.append(hdr)
    for K, cb, mb24, mb27, tr, tl, tm in rows:
        ours_r = ours.get(("expert", f"glm53 8x(g+u+d) 6144<->2048 K{K} {cb} b1"))
        # moe-layer's experts row (routed + shared, 2 launches, no routing):
        # "experts only" or "experts CONFIG xSPEEDUP", by glm-engine version.
        pre = f"glm53 K{K} {cb} b1 experts"
        ours_l = next((v for (su, n), v in ours.items()
                       if su == "moe-layer" and n.startswith(pre)), None)
        fmt = lambda v: "-" if v is None else f"{v:.1f}"
        sp = lambda o, t: "-" if o is None else f"{t / o[0]:.2f}"
        out.append(f"K{K:<2}{cb:<6}{mb24:>7.1f}{tr:>16.1f}{frac(mb24, tr):>7.3f}"
                   f"{tl:>15.1f}{frac(mb27, tl):>7.3f}{fmt(tm):>10}"
                   f"{fmt(ours_r[0] if ours_r else None):>13}{sp(ours_r, tr):>6}"
                   f"{fmt(ours_l[0] if ours_l else None):>12}{sp(ours_l, tl):>6}")
    out.append(f"dense fp16 cuBLAS, same 24 matrices ({mbd:.0f} MB): 24 x torch.matmul "
               f"{t_d * 1e3:.1f} us (frac {frac(mbd, t_d * 1e3):.3f}); "
               f"2 x torch.bmm {t_b * 1e3:.1f} us (frac {frac(mbd, t_b * 1e3):.3f})")
    out.append("coop routed = exl3_moe_coop, 2 launches (run_bszN); coop layer = + shared expert "
               "coop launch, 4 launches, MB27 = MB24 * 27/24; mgemm = 3 x exl3_mgemm + silu_mul")
    out.append("ours routed = expert suite b1 (8 experts x gate/up/down); ours exp+sh = moe-layer "
               "experts row (routed + shared, 2 launches); neither side includes the router")
    out += ["check: " + c for c in checks]
    text = "\n".join(out) + "\n"
    print("\n== exl3 baseline\n" + text, end="", flush=True)
    if a.table:
        with open(a.table, "w") as f:
            f.write(text)
    return 0 if all(c.count("FAIL") == 0 for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
