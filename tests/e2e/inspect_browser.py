#!/usr/bin/env python3
"""`glmc inspect --format html` rendered by a headless browser (ctest e2e.inspect_browser).

For a 2-rank GLM-5.3 tiny plan and a 1-rank GLM-5.3-Flash tiny plan (index-only packs: compiling
reads no weight bytes), the page is loaded in headless Chromium (scripts/setup installs Debian's
chromium-headless-shell) and checked from what the browser built:
- the DOM it dumps (--dump-dom): parsed to its end, no `parsererror`, under each rank's heading one
  <details> per layer of the plan (embed, 0..n-1, head), each with one layer graph whose boxes are
  that layer's ops of the smallest decode graph, in order (names from `glmc inspect --format json`);
- no console message (Chromium logs every console message and uncaught error as CONSOLE);
- a probe script in a copy of the page, with every layer opened: no horizontal overflow at
  1400 px, every layer graph's drawing inside its <svg>, every op name inside its box, boxes that
  do not overlap, the whole decode graph (Graphviz) at its own size, not shrunk to the window,
  every cost-strip segment coloured, no resource loaded (the page is self-contained);
- screenshots (1400 x 2000): the page as served, and its layers opened; each PNG is decoded (zlib,
  no imaging library) and must be 1400 x 2000 with more than 64 colours, the first one with the
  cost strip's colours. They are left in ARTIFACTS for CI.

Usage: inspect_browser.py WORK ARTIFACTS. A missing browser fails, naming scripts/setup, unless
GLM_SKIP_BROWSER=1, which skips (exit 77). GLM_BROWSER names another Chromium binary.
"""
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zlib

SKIP = 77
WIDTH, HEIGHT = 1400, 2000


def fail(msg):
    print(f"inspect_browser: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def find_browser():
    given = os.environ.get("GLM_BROWSER")
    if given:
        return shutil.which(given) or fail(f"GLM_BROWSER={given} is not an executable")
    for name in ("chromium-headless-shell", "chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("GLM_SKIP_BROWSER") == "1":
        print("inspect_browser: no headless Chromium; skipped (GLM_SKIP_BROWSER=1)")
        sys.exit(SKIP)
    fail("no headless Chromium (chromium-headless-shell or chromium) on PATH: run scripts/setup, "
         "which installs Debian's chromium-headless-shell (or set GLM_SKIP_BROWSER=1 to skip)")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout


def browse(browser, work, page, screenshot):
    """Loads `page`; returns the dumped DOM and the console lines, writes `screenshot`."""
    cmd = [browser, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
           "--force-device-scale-factor=1", f"--window-size={WIDTH},{HEIGHT}",
           f"--user-data-dir={work}/browser-profile", "--enable-logging=stderr", "--v=0",
           f"--screenshot={screenshot}", "--dump-dom", "file://" + os.path.abspath(page)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-4000:]}")
    console = [l for l in r.stderr.splitlines() if ":CONSOLE" in l]
    return r.stdout, console


# --- PNG (8-bit RGB or RGBA, not interlaced: what Chromium writes) ------------------------------

def read_png(path):
    """Returns (width, height, rows), each row width*3 bytes of RGB."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    at, idat, ihdr = 8, [], None
    while at < len(data):
        (n,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        at += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        fail(f"{path}: PNG depth {depth}, colour type {ctype}, interlace {interlace} not read here")
    bpp = 3 if ctype == 2 else 4
    stride = w * bpp
    raw = zlib.decompress(b"".join(idat))
    if len(raw) != (stride + 1) * h:
        fail(f"{path}: {len(raw)} bytes of pixels for {w} x {h}")
    rows, prev = [], bytes(stride)
    lo7 = int.from_bytes(b"\x7f" * stride, "big")
    hi1 = int.from_bytes(b"\x80" * stride, "big")
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)]
        if f == 0:
            cur = line
        elif f == 2:  # up: bytewise sum without carries between bytes
            a, b = int.from_bytes(line, "big"), int.from_bytes(prev, "big")
            cur = (((a & lo7) + (b & lo7)) ^ ((a ^ b) & hi1)).to_bytes(stride, "big")
        else:
            c = bytearray(line)
            for i in range(stride):
                left = c[i - bpp] if i >= bpp else 0
                if f == 1:
                    c[i] = (c[i] + left) & 255
                elif f == 3:
                    c[i] = (c[i] + ((left + prev[i]) >> 1)) & 255
                elif f == 4:
                    up, ul = prev[i], (prev[i - bpp] if i >= bpp else 0)
                    p = left + up - ul
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                    c[i] = (c[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else ul)) & 255
                else:
                    fail(f"{path}: PNG filter {f}")
            cur = bytes(c)
        rows.append(cur if bpp == 3 else b"".join(cur[i:i + 3] for i in range(0, stride, 4)))
        prev = cur
    return w, h, rows


def check_png(path, colours=()):
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        fail(f"the browser wrote no screenshot {path}")
    w, h, rows = read_png(path)
    if (w, h) != (WIDTH, HEIGHT):
        fail(f"{path} is {w} x {h}, not {WIDTH} x {HEIGHT}")
    seen = set()
    for row in rows:
        seen.update(row[i:i + 3] for i in range(0, len(row), 3))
    if len(seen) <= 64:
        fail(f"{path} has {len(seen)} colours: blank or barely drawn")
    for c in colours:
        if bytes.fromhex(c) not in seen:
            fail(f"{path} has no pixel of #{c}")
    return len(seen)


# --- the DOM the browser dumped ---------------------------------------------------------------

class Dom(html.parser.HTMLParser):
    """Collects, under each <h2>, the <details> layers: summary text, layer graphs, their op names."""

    def __init__(self):
        super().__init__()
        self.h2 = None
        self.text_into = None  # "h2" | "summary" | "title"
        self.layers = []  # {rank h2, summary, graphs: [[op names]], rects}
        self.in_details = False
        self.svg = None
        self.in_graph = False  # inside <div class=graph>, the whole decode graph
        self.decode_graph = False
        self.h2s = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and a.get("class") == "graph":
            self.in_graph = True
        elif tag == "svg" and self.in_graph:
            self.decode_graph = True
        if tag == "h2":
            self.h2s.append("")
            self.text_into = "h2"
        elif tag == "details":
            self.in_details = True
            self.layers.append({"h2": self.h2s[-1] if self.h2s else "", "summary": "",
                                "graphs": []})
        elif tag == "summary" and self.in_details:
            self.text_into = "summary"
        elif tag == "svg" and self.in_details and "layergraph" in a.get("class", "").split():
            self.svg = {"titles": [], "rects": 0, "texts": 0}
            self.layers[-1]["graphs"].append(self.svg)
        elif self.svg is not None and tag == "rect":
            self.svg["rects"] += 1
        elif self.svg is not None and tag == "text":
            self.svg["texts"] += 1
        elif self.svg is not None and tag == "title":
            self.svg["titles"].append("")
            self.text_into = "title"

    def handle_endtag(self, tag):
        if tag in ("h2", "summary", "title"):
            self.text_into = None
        elif tag == "details":
            self.in_details = False
        elif tag == "div":
            self.in_graph = False
        elif tag == "svg":
            self.svg = None

    def handle_data(self, data):
        if self.text_into == "h2":
            self.h2s[-1] += data
        elif self.text_into == "summary":
            self.layers[-1]["summary"] += data
        elif self.text_into == "title":
            self.svg["titles"][-1] += data


def expected_layers(plan_json):
    """Per rank: [(label, [op names])] of the smallest decode graph, in layer order."""
    n = plan_json["model"]["num_layers"]
    out = []
    for r in plan_json["ranks"]:
        decodes = [g for g in r["graphs"] if g["kind"] == "decode"]
        g = min(decodes, key=lambda g: int(g["name"].split(".")[1]))
        ops = {}
        for op in g["ops"]:
            ops.setdefault(op["layer"], []).append(op["name"])
        label = lambda l: "embed" if l < 0 else "head" if l >= n else str(l)
        out.append((r["rank"], [(label(l), ops[l]) for l in sorted(ops)]))
        want = ["embed"] + [str(i) for i in range(n)] + ["head"]
        got = [lab for lab, _ in out[-1][1]]
        if got != want:
            fail(f"rank {r['rank']}'s {g['name']} graph has layers {got}, the plan {want}")
    return out


def check_dom(name, dom, console, plan_json, graphviz):
    if console:
        fail(f"{name}: the page logged to the console:\n" + "\n".join(console))
    if "parsererror" in dom:
        fail(f"{name}: the browser reports a parsererror")
    p = Dom()
    p.feed(dom)
    p.close()
    if not p.h2s or not p.h2s[-1].startswith("Decode graph"):
        fail(f"{name}: the DOM ends before the last section (headings {p.h2s})")
    if graphviz and not p.decode_graph:
        fail(f"{name}: Graphviz is installed and the page has no decode graph svg")
    want = expected_layers(plan_json)
    count = sum(len(layers) for _, layers in want)
    if len(p.layers) != count:
        fail(f"{name}: {len(p.layers)} layer <details>, the plan has {count} "
             f"({' + '.join(str(len(l)) for _, l in want)} over {len(want)} rank(s))")
    at = 0
    for rank, layers in want:
        for label, ops in layers:
            got = p.layers[at]
            at += 1
            where = f"{name}: rank {rank} layer {label}"
            if got["h2"] != f"Rank {rank}":
                fail(f"{where}: its <details> is under '{got['h2']}'")
            if not got["summary"].startswith(f"layer {label} ("):
                fail(f"{where}: summary '{got['summary']}'")
            if len(got["graphs"]) != 1:
                fail(f"{where}: {len(got['graphs'])} layer graphs")
            g = got["graphs"][0]
            names = [t.split(":")[0] for t in g["titles"]]
            if g["rects"] != len(ops) or g["texts"] != len(ops) or names != ops:
                fail(f"{where}: the graph draws {g['rects']} boxes {names}, the layer has "
                     f"{len(ops)} ops {ops}")
    return count, sum(len(ops) for _, layers in want for _, ops in layers)


# The probe: every layer opened, geometry measured, written into the DOM as JSON; then
# everything but the layers hidden for the second screenshot.
PROBE = """<style>body.glm-layers > :not(details){display:none}</style><script>
(function(){
  var out = {problems: []};
  function bad(s){ out.problems.push(s); }
  document.querySelectorAll('details').forEach(function(d){ d.open = true; });
  var vw = document.documentElement.clientWidth;
  var sw = document.documentElement.scrollWidth;
  if (sw > vw) bad('the page is ' + sw + ' px wide in a ' + vw + ' px window');
  var res = performance.getEntriesByType('resource');
  if (res.length) bad('the page loads ' + res.map(function(e){ return e.name; }).join(', '));
  out.graphs = 0;
  document.querySelectorAll('svg.layergraph').forEach(function(svg){
    out.graphs++;
    var name = svg.getAttribute('aria-label');
    var w = svg.width.baseVal.value, h = svg.height.baseVal.value, b = svg.getBBox();
    if (b.x < -0.5 || b.y < -0.5 || b.x + b.width > w + 0.5 || b.y + b.height > h + 0.5)
      bad(name + ': drawing ' + [b.x, b.y, b.width, b.height].map(Math.round) +
          ' outside its ' + w + ' x ' + h + ' svg');
    var lastBottom = -1;
    svg.querySelectorAll('g').forEach(function(g){
      var r = g.querySelector('rect').getBBox(), t = g.querySelector('text').getBBox();
      var op = g.querySelector('text').textContent;
      if (t.x < r.x || t.x + t.width > r.x + r.width || t.y < r.y - 1 ||
          t.y + t.height > r.y + r.height + 1)
        bad(name + ': op ' + op + ' label ' + [t.x, t.y, t.width, t.height].map(Math.round) +
            ' outside its box ' + [r.x, r.y, r.width, r.height]);
      if (r.y < lastBottom) bad(name + ': box of ' + op + ' overlaps the one above');
      lastBottom = r.y + r.height;
    });
  });
  document.querySelectorAll('.graph > svg').forEach(function(svg){
    var shown = svg.getBoundingClientRect().width, own = svg.width.baseVal.value;
    if (shown < 0.9 * own)
      bad('the decode graph is drawn ' + Math.round(shown) + ' px wide of its ' +
          Math.round(own) + ': its labels shrink unreadably');
  });
  document.querySelectorAll('.strip > div').forEach(function(d){
    var c = getComputedStyle(d).backgroundColor;
    if (c === 'rgba(0, 0, 0, 0)' || c === 'transparent')
      bad('cost strip segment ' + d.title + ' has no colour (' + d.className + ')');
  });
  var pre = document.createElement('pre');
  pre.id = 'glm-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
  document.body.className = 'glm-layers';
})();
</script></body>"""


def check_probe(name, dom, console, graphs):
    if console:
        fail(f"{name} (probe): console:\n" + "\n".join(console))
    start = dom.find('<pre id="glm-probe">')
    if start < 0:
        fail(f"{name}: the probe script did not run")
    body = dom[start + len('<pre id="glm-probe">'):dom.index("</pre>", start)]
    out = json.loads(html.unescape(body))
    if out["graphs"] != graphs:
        fail(f"{name}: the probe measured {out['graphs']} layer graphs, not {graphs}")
    if out["problems"]:
        fail(f"{name}: rendered page:\n  " + "\n  ".join(out["problems"]))


def main():
    if len(sys.argv) != 3:
        fail("usage: inspect_browser.py WORK ARTIFACTS")
    work, artifacts = sys.argv[1], sys.argv[2]
    browser = find_browser()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.makedirs(artifacts, exist_ok=True)
    env = dict(os.environ, GLMC_KERNEL_CACHE=os.path.join(work, "kernel-cache"), GLM_PROGRESS="0")
    graphviz = shutil.which("dot") is not None
    version = run([browser, "--version"]).strip()
    cases = [
        # name, synth preset, compile flags
        ("tiny", "tiny", ["--sparks", "2", "--manifest", "mixed"]),
        ("flash-tiny", "flash-tiny", ["--manifest", "mixed", "--prefill-chunks", "0"]),
    ]
    start = time.time()
    for name, preset, flags in cases:
        pack, plan = os.path.join(work, name), os.path.join(work, name + ".glmplan")
        run(["glmc", "synth", "--preset", preset, "--layout", "exlr8", "--index-only", "-o", pack],
            env=env)
        run(["glmc", "compile", pack, "--no-nvrtc", *flags, "-o", plan], env=env)
        plan_json = json.loads(run(["glmc", "inspect", plan, "--format", "json"], env=env))
        page = os.path.join(artifacts, f"inspect-{name}.html")
        run(["glmc", "inspect", plan, "--format", "html", "-o", page], env=env)

        shot = os.path.join(artifacts, f"inspect-{name}.png")
        dom, console = browse(browser, work, page, shot)
        layers, ops = check_dom(name, dom, console, plan_json, graphviz)
        # The strip's colours (.k-dense, .k-moe, .k-head): the page's CSS applied.
        ncol = check_png(shot, ["4a7ab8", "c0504d", "6b8e23"])

        probe_page = os.path.join(work, f"probe-{name}.html")
        with open(page) as f:
            text = f.read()
        if text.count("</body>") != 1:
            fail(f"{page}: {text.count('</body>')} </body> tags")
        with open(probe_page, "w") as f:
            f.write(text.replace("</body>", PROBE))
        shot2 = os.path.join(artifacts, f"inspect-{name}-layers.png")
        dom2, console2 = browse(browser, work, probe_page, shot2)
        check_probe(name, dom2, console2, layers)
        ncol2 = check_png(shot2)
        print(f"{name}: {len(plan_json['ranks'])} rank(s), {layers} layer sections, {ops} op "
              f"boxes; screenshots {shot} ({ncol} colours), {shot2} ({ncol2} colours)")
    print(f"inspect_browser: ok with {version} in {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
