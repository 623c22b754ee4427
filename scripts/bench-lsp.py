#!/usr/bin/env python3
"""`envc lsp` as an editor sees it, on a 1,000-line file.

Generates the 930-host inventory of compiler/benches/envgen (1,010 lines, 4,650 nodes),
opens it in a real `envc lsp` over stdio, then edits it EDITS times, one tuning value
at a time, and after each edit asks for a hover (which waits for the new analysis) and
waits for the diagnostics the edit causes (sent 150 ms after the last change). Prints
the latencies (median, p95, max) and the server's resident memory early and late in the
session, which stays flat when nothing outlives a change.

    scripts/bench-lsp.py [EDITS]        # default 300; needs target/release/envc
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVC = os.environ.get("ENVC", os.path.join(ROOT, "target/release/envc"))
EDITS = int(sys.argv[1]) if len(sys.argv) > 1 else 300


class Server:
    def __init__(self, cwd):
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(cwd, "cache"))
        self.p = subprocess.Popen([ENVC, "lsp"], cwd=cwd, env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.next_id = 0

    def send(self, msg):
        body = json.dumps(msg).encode()
        self.p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.p.stdin.flush()

    def read(self):
        length = None
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise SystemExit("envc lsp exited")
            line = line.strip()
            if not line:
                break
            if line.startswith(b"Content-Length:"):
                length = int(line.split(b":")[1])
        return json.loads(self.p.stdout.read(length))

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            m = self.read()
            if m.get("id") == self.next_id:
                return m

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def diagnostics(self, uri):
        while True:
            m = self.read()
            if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri:
                return m["params"]["diagnostics"]

    def rss_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])


def summary(name, ms):
    ms = sorted(ms)
    p95 = ms[int(len(ms) * 0.95) - 1]
    print(f"{name:<34} median {statistics.median(ms):6.1f} ms   p95 {p95:6.1f} ms   max {ms[-1]:6.1f} ms")


def main():
    with tempfile.TemporaryDirectory(prefix="envc-bench-lsp-") as d:
        subprocess.run(["cargo", "run", "-q", "--release", "-p", "envc-compiler", "--example",
                        "gen_env", "--", "930", "5", d], cwd=ROOT, check=True)
        path = os.path.join(d, "main.env")
        text = open(path).read()
        uri = "file://" + path
        lines = text.count("\n")
        hover_line = next(i for i, l in enumerate(text.split("\n")) if l.startswith("fn stack("))
        s = Server(d)
        s.request("initialize", {"processId": None, "rootUri": "file://" + d, "capabilities": {}})
        s.notify("initialized", {})
        t = time.monotonic()
        s.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "envc", "version": 1, "text": text}})
        assert s.diagnostics(uri) == []
        print(f"{lines} lines, {EDITS} edits; open to diagnostics: {(time.monotonic() - t) * 1000:.1f} ms")
        hover, diags, rss = [], [], {}
        for i in range(EDITS):
            # One tuning value changes: `workers = N` of host i.
            edited = text.replace("{ workers = 1 }", "{ workers = %d }" % (1 + i % 60), 1)
            t = time.monotonic()
            s.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": i + 2}, "contentChanges": [{"text": edited}]})
            r = s.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": hover_line, "character": 4}})
            hover.append((time.monotonic() - t) * 1000)
            assert "result" in r and r["result"], r
            assert s.diagnostics(uri) == []
            diags.append((time.monotonic() - t) * 1000)
            if i + 1 in (50, EDITS):
                rss[i + 1] = s.rss_kib()
        summary("change -> hover answered", hover)
        summary("change -> diagnostics (150 ms debounce)", diags)
        for k, v in rss.items():
            print(f"resident memory after {k:>4} edits: {v / 1024:6.1f} MiB")
        s.request("shutdown", None)
        s.notify("exit", None)
        s.p.wait(timeout=10)


main()
