"""Worker processes and version records shared by the benchmarks that run each
runtime (or build) in its own process (bench_encoder.py, _kmodel.py,
bench_engine.py)."""
from __future__ import annotations

import json
import subprocess
import sys


class PipeWorker:
    """A worker process driven over its stdin/stdout: it prints ``ready`` (plus an
    optional JSON object, kept as ``info``) once started, then answers every command
    line with one JSON line."""

    def __init__(self, argv, env, cwd, what):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=env, cwd=cwd)
        line = self.p.stdout.readline()
        if not line.startswith("ready"):
            self.p.kill()
            self.p.wait()
            raise RuntimeError(f"worker {what} failed to start")
        self.info = json.loads(line[len("ready"):].strip() or "{}")

    def ask(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
        except OSError:
            pass
        self.p.wait()


def versions(dists, python=sys.executable):
    """{distribution: installed version or None, "python": version} as ``python``
    (another interpreter, e.g. the device's) sees them."""
    code = ("import json, sys, importlib.metadata as m\nv = {}\n"
            f"for d in {tuple(dists)!r}:\n"
            "    try: v[d] = m.version(d)\n    except Exception: v[d] = None\n"
            "v['python'] = sys.version.split()[0]\nprint(json.dumps(v))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-300:]}
