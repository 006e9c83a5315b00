"""Every example in README.md and docs/*.md runs as written.

Fenced blocks by info string:
- ``python``: run in a fresh interpreter in an empty directory;
- ``python gpu``: the same where CUDA is available, else skipped with that reason;
- ``python kokoro``: the same in a directory holding Kokoro-82M's ``config.json`` and a
  ``kokoro-v1_0.pth`` of random weights (what a Kokoro user has);
- ``sh run``: run with bash (the venv's scripts on PATH) in an empty directory;
- ``sh``, ``text``, ``c``: commands or text to read, not run.
Any other info string fails, so a block cannot be left out by accident.
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
RUN = {"python": "python", "python gpu": "python", "python kokoro": "python", "sh run": "sh"}
READ_ONLY = {"sh", "text", "c", ""}
FENCE = re.compile(r"^```([^`\n]*)\n(.*?)^```\s*$", re.M | re.S)
TIMEOUT = 300


def blocks():
    """(file, line, info, source) of every fenced block of the docs."""
    out = []
    for path in DOCS:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append((os.path.relpath(path, ROOT), line, m.group(1).strip(), m.group(2)))
    return out


ALL = blocks()
RUNNABLE = [b for b in ALL if b[2] in RUN]


def test_every_block_is_marked():
    bad = [f"{f}:{n} ```{info}" for f, n, info, _ in ALL if info not in RUN and info not in READ_ONLY]
    assert not bad, f"unknown fence info strings (use one of {sorted(RUN) + sorted(READ_ONLY)}): {bad}"
    for path in DOCS:  # an indented fence would escape FENCE, and so the test
        with open(path, encoding="utf-8") as f:
            indented = [i + 1 for i, line in enumerate(f) if re.match(r"\s+```", line)]
        assert not indented, f"{os.path.relpath(path, ROOT)}: indented fences at lines {indented}"


def test_readme_states_the_test_command():
    """.ci/run and newcomers rely on this line."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        assert "The test command is `make test`." in f.read()


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _kokoro_files(folder):
    """config.json and kokoro-v1_0.pth (random weights) as a Kokoro user has them."""
    import json

    from deploy import tts

    with open(folder / "config.json", "w") as f:
        json.dump(tts.config(), f)
    tts.save(tts.kmodel(seed=0), str(folder / "kokoro-v1_0.pth"))


@pytest.mark.parametrize("block", RUNNABLE, ids=[f"{f}:{n}" for f, n, _, _ in RUNNABLE])
def test_example_runs(block, tmp_path):
    path, line, info, src = block
    if info == "python gpu" and not _cuda_available():
        pytest.skip(f"{path}:{line} needs an NVIDIA GPU (marked ```python gpu)")
    if info == "python kokoro":
        _kokoro_files(tmp_path)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("KOKORO_LSTM_NUM_THREADS", "2")
    if RUN[info] == "python":
        cmd = [sys.executable, "-c", src]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", src]
    timeout = 900 if info == "python kokoro" else TIMEOUT  # Inductor compiles all of Kokoro
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{path}:{line} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def _report():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import report
    finally:
        sys.path.pop(0)
    return report


def test_results_md_is_generated():
    """benchmarks/RESULTS.md is what report.py renders from benchmarks/results/."""
    report = _report()
    with open(os.path.join(ROOT, "benchmarks", "RESULTS.md"), encoding="utf-8") as f:
        assert f.read() == report.render(os.path.join(ROOT, "benchmarks", "results")), \
            "RESULTS.md is stale: run python benchmarks/report.py"


def test_results_hold_only_cited_files():
    report = _report()
    held = sorted(os.listdir(os.path.join(ROOT, "benchmarks", "results")))
    assert held == report.cited(), f"not cited by report.py: {sorted(set(held) - set(report.cited()))}"
