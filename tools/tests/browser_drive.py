#!/usr/bin/env python3
# browser_drive.py: drives the kda explore page in headless Chromium as a reader would (make
# check-browser, through browser_check.sh) and checks what each interactive shows.
# SPDX-License-Identifier: MIT
#
# A small client of the Chrome DevTools Protocol over --remote-debugging-pipe (file
# descriptors 3 and 4, NUL-terminated JSON messages): no websocket library, no network.  Each
# check sets inputs, clicks buttons and presses keys through the page's DOM (events as a
# reader's), then reads what the page shows.  The port of the float64 step (script#kda-step)
# is run on every token of `kda trace --json` and must give its bits (Object.is on every
# value, so -0 and +0 differ).  Screenshots go to OUT.
#
# Usage: browser_drive.py CHROMIUM NOTEBOOK.html PLAYER.html OUT TRACE.json...
import base64
import json
import os
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, exe, profile):
        r1, self.w = os.pipe()  # we write commands, Chromium reads them on fd 3
        self.r, w2 = os.pipe()  # Chromium writes replies on fd 4
        def fds():  # the child's fds 3 and 4, whatever numbers the pipes got here
            a, b = os.dup(r1), os.dup(w2)
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.p = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", "--user-data-dir=" + profile, "--window-size=1300,1000",
             "about:blank"], close_fds=False, preexec_fn=fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(r1)
        os.close(w2)
        self.buf = b""
        self.n = 0
        self.session = None

    def send(self, method, params=None, session=True):
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + 60
        while time.time() < deadline:
            while b"\0" not in self.buf:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
            line, self.buf = self.buf.split(b"\0", 1)
            rep = json.loads(line)
            if rep.get("id") == self.n:
                if "error" in rep:
                    raise RuntimeError(f"{method}: {rep['error']}")
                return rep.get("result", {})
        raise RuntimeError(f"{method}: no reply in 60 s")

    def open(self, url):
        tid = self.send("Target.createTarget", {"url": "about:blank"}, False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": tid, "flatten": True},
                                 False)["sessionId"]
        self.send("Runtime.enable")
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1300, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.bringToFront")
        self.send("Emulation.setFocusEmulationEnabled", {"enabled": True})
        self.send("Page.navigate", {"url": url})
        for _ in range(200):
            if self.js("document.body && document.body.getAttribute('data-ready')") == "1":
                return
            time.sleep(0.05)
        errs = self.js("document.getElementById('kda-errors').textContent")
        raise RuntimeError(f"{url}: the page did not finish (no data-ready): {errs}")

    def js(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr[:80]}: {r['exceptionDetails'].get('exception', {}).get('description', r['exceptionDetails'])}")
        return r["result"].get("value")

    def key(self, k, code, vk, text=None):
        down = {"type": "keyDown" if text else "rawKeyDown", "key": k, "code": code,
                "windowsVirtualKeyCode": vk}
        if text:
            down["text"] = text
        self.send("Input.dispatchKeyEvent", down)
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": k, "code": code,
                                             "windowsVirtualKeyCode": vk})

    def shot(self, path, full=True):
        p = {"format": "png"}
        if full:
            m = self.send("Page.getLayoutMetrics")["cssContentSize"]
            p["clip"] = {"x": 0, "y": 0, "width": m["width"], "height": m["height"], "scale": 1}
            p["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", p)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.send("Browser.close", session=False)
        except Exception:
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()


# Helpers evaluated in the page: set an input as a reader would (value, then an input event),
# click, read a number shown.
HELPERS = r"""
window.T = {
  set: function (id, v) { var e = document.getElementById(id); e.value = String(v);
    e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); },
  click: function (id) { document.getElementById(id).click(); },
  num: function (id) { return parseFloat(document.getElementById(id).textContent); },
  cells: function (sel) { return Array.from(document.querySelectorAll(sel + ' td')).map(function (c) { return c.textContent; }).join(','); },
  cur: function (ol) { var l = document.querySelectorAll('#' + ol + ' li'); for (var i = 0; i < l.length; i++) if (l[i].getAttribute('aria-current') === 'step') return i; return -1; },
  changed: function (sel) { return document.querySelectorAll(sel + ' td.chg').length; }
};
"""

FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILS.append(what)


def port_bits(b, trace):
    """The page's step on every token of kda trace --json, chained from the trace's initial
    state through the page's own states: every value must be the trace's bits."""
    src = "(function(tr){var S=tr.initial_state.f64,bad=[],n=0;" \
          "function same(x,y,w){for(var i=0;i<x.length;i++){n++;if(!Object.is(x[i],y[i]))bad.push(w+'['+i+'] '+x[i]+' != '+y[i]);}}" \
          "tr.steps.forEach(function(st){var p=tr.problem,r=KDA.step({K:p.K,V:p.V," \
          "decays:p.family==='kda'||p.family==='gdn'?1:0,erases:p.family==='linear'?0:1," \
          "qq:st.q_hat.f64,kk:st.k_hat.f64,a:st.a.f64,v:st.v.f64,b:st.beta.f64[0],S:S});" \
          "same(r.Sd,st.decayed_state.f64,'t'+st.t+' Sd');same(r.p,st.p.f64,'t'+st.t+' p');" \
          "same(r.c,st.correction.f64,'t'+st.t+' c');same(r.S,st.written_state.f64,'t'+st.t+' S');" \
          "same(r.o,st.o.f64,'t'+st.t+' o');S=r.S;});return {n:n,bad:bad.slice(0,5),nbad:bad.length};})(" \
          + json.dumps(trace) + ")"
    return b.js(src)


def notebook(b, out):
    b.js(HELPERS)
    # the notebook starts with three capitals, France chosen, every dial at 1
    check(b.js("document.querySelectorAll('#stream li').length") == 3, "notebook: three facts to start")
    m0 = b.js("T.num('mass-kda')")
    s0 = b.js("T.cells('#mem-kda')")
    g0 = b.js("T.cells('#mem-gdn')")
    # drag channel 0's dial: KDA's state and mass follow, Gated DeltaNet's do not
    b.js("T.set('nb-a0', 0.3)")
    check(b.js("T.cells('#mem-kda')") != s0 and b.js("T.num('mass-kda')") < m0,
          "dial a0 = 0.3: KDA's state changes and its mass drops")
    check(b.js("T.cells('#mem-gdn')") == g0, "dial a0: Gated DeltaNet's state is unchanged")
    check(b.js("document.querySelector('#mem-kda td').textContent") == "0.09",
          "dial a0 = 0.3: France's fact (row 0), decayed by the two tokens after it, is 0.3^2")
    b.js("T.set('nb-a0', 1)")
    # one dimmer: every row of Gated DeltaNet fades together, KDA keeps its rows
    b.js("T.set('nb-alpha', 0.5)")
    gd = b.js("Array.from(document.querySelectorAll('#mem-gdn td')).map(function(c){return c.textContent})")
    check(gd[0] == "0.25" and gd[5] == "0.5" and gd[10] == "1",
          f"dimmer 0.5: Gated DeltaNet's facts fade by age on every row at once ({gd[0]}, {gd[5]}, {gd[10]})")
    check(b.js("T.cells('#mem-kda')") == s0, "dimmer: KDA's state is unchanged")
    b.js("T.set('nb-alpha', 1)")
    # correct a stored fact: France -> Lyon; the delta rule overwrites, the accumulator adds
    b.js("T.click('nb-fact-France-Lyon'); T.click('nb-feed')")
    check(b.js("document.getElementById('nb-fact').value") == "France", "preset France -> Lyon chooses the fact France")
    ek, ea = b.js("T.num('err-kda')"), b.js("T.num('err-acc')")
    check(ek < 1e-5 and ea > 0.99, f"correction: KDA reads Lyon back (error {ek}), the accumulator "
          f"still mixes Paris in (error {ea})")
    b.shot(os.path.join(out, "notebook-correction.png"))
    # mass: the delta rule's stays bounded, the accumulator's grows
    b.js("T.click('nb-random')")
    masses = json.loads(b.js("document.getElementById('nb-chart').getAttribute('data-mass')"))
    kda, acc = masses[0], masses[2]
    check(len(kda) == 29 and max(kda) < 3.0 and acc[-1] > 2 * kda[-1] and acc[-1] > acc[5],
          f"24 random facts: KDA's mass stays at most {max(kda):.3g}, the accumulator's grows to {acc[-1]:.3g}")
    # step a head token by token: the highlighted sub-step follows the buttons and the keys
    b.js("T.click('nb-reset'); T.set('nb-a0', 0.5); T.set('nb-tok', 1)")
    check(b.js("T.cur('nb-steps')") == 0, "token 2 chosen: sub-step 1 (decay) is highlighted")
    check(b.js("T.changed('#nb-subheat')") == 1,
          "decay of token 2 with a0 = 0.5: the one cell it changed (France's) is marked")
    b.js("T.click('nb-sub-next')")
    check(b.js("T.cur('nb-steps')") == 1 and b.js("T.changed('#nb-subheat')") == 0,
          "step: sub-step 2 (erase) highlighted, no cell changed by the prediction")
    b.js("document.getElementById('nb-sub-next').focus()")
    b.key("Enter", "Enter", 13, "\r")
    check(b.js("T.cur('nb-steps')") == 2 and b.js("T.changed('#nb-subheat')") > 0,
          "Enter on the focused step button: sub-step 3 (write) highlighted, its cells marked")
    check(b.js("document.activeElement.id") == "nb-sub-next", "focus stays on the step button")
    b.shot(os.path.join(out, "notebook-substep.png"))
    # the KV cache against the fixed state
    b.js("T.set('kv-n', 6)")
    cache = b.js("+document.getElementById('kv-cache').getAttribute('data-bytes')")
    state = b.js("+document.getElementById('kv-state').getAttribute('data-bytes')")
    check(cache == 1e6 * 256 * 2 and state == 128 * 128 * 4,
          f"one million tokens: a KV cache of {cache} bytes against a state of {state}")
    # labels: every input and select of the page has an accessible name
    unnamed = b.js("Array.from(document.querySelectorAll('input,select')).filter(function(e){"
                   "return !(e.labels&&e.labels.length)&&!e.getAttribute('aria-label');}).map(function(e){return e.id;})")
    check(unnamed == [], f"every input has a label ({unnamed})")


def player(b, out):
    b.js(HELPERS)
    check(b.js("T.cur('steps')") == 0, "player: opens at token 0, sub-step decay")
    z = b.js("T.cells('#heat-lin')")
    check(set(z.split(",")) == {"0"}, "player step 0: the accumulator shows the state before "
          "token 0's write (zeros)")
    check("\u2016S\u2016_F" in b.js("document.getElementById('now').textContent"),
          "player: the header names ||S||_F, the quantity plotted")
    b.js("document.getElementById('b-next').focus()")
    b.key("ArrowRight", "ArrowRight", 39)
    b.key("ArrowRight", "ArrowRight", 39)
    now = b.js("T.cur('steps')")
    check(now == 2 and b.js("document.body.getAttribute('data-step')") == "2",
          f"Right twice: sub-step 3 (write) highlighted (sub-step index {now})")
    check(set(b.js("T.cells('#heat-lin')").split(",")) != {"0"} and b.js("T.changed('#heat-lin')") > 0,
          "write: the accumulator shows token 0's write, changed cells marked")
    labels = b.js("Array.from(document.querySelectorAll('#decays text.barval')).map(function(t){var r=t.getBoundingClientRect();return [r.x,r.width];})")
    over = [i for i in range(1, len(labels)) if labels[i][0] < labels[i - 1][0] + labels[i - 1][1]]
    check(len(labels) > 0 and not over, f"decay bars: {len(labels)} value labels, none overlapping")
    b.shot(os.path.join(out, "explorer.png"))


def main():
    exe, nb_html, pl_html, out = sys.argv[1:5]
    traces = []
    for path in sys.argv[5:]:
        with open(path) as f:
            traces.append((path, json.load(f)))
    with tempfile.TemporaryDirectory() as prof:
        b = Browser(exe, prof)
        try:
            b.open("file://" + os.path.abspath(nb_html))
            for path, trace in traces:
                r = port_bits(b, trace)
                check(r["n"] > 0 and r["nbad"] == 0,
                      f"the page's step gives kda trace's float64 bits on {os.path.basename(path)} "
                      f"({trace['problem']['family']}): {r['n']} values, {r['nbad']} differ {r['bad']}")
            notebook(b, out)
            b.open("file://" + os.path.abspath(pl_html) + "#step=0")
            player(b, out)
            errs = b.js("document.getElementById('kda-errors').textContent")
            check(errs == "", f"no script error ({errs})")
        finally:
            b.close()
    if FAILS:
        print(f"browser_drive: {len(FAILS)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
