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


def test_doc_tables_are_rendered():
    """Every <!-- report.py: NAME --> block of README.md and docs/*.md is what report.py
    renders there from benchmarks/results/, so prose cannot carry a stale number."""
    report = _report()
    results = os.path.join(ROOT, "benchmarks", "results")
    stale = []
    for path in DOCS:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        opened = re.findall(r"<!-- report\.py: ([\w-]+) -->", text)
        assert len(opened) == len(report.BLOCK.findall(text)), \
            f"{os.path.relpath(path, ROOT)}: a report.py block without its end marker"
        unknown = sorted(set(opened) - set(report.DOC_BLOCKS))
        assert not unknown, f"{os.path.relpath(path, ROOT)}: report.py renders no {unknown}"
        if report.fill_blocks(text, results) != text:
            stale.append(os.path.relpath(path, ROOT))
    assert not stale, f"stale tables in {stale}: run python benchmarks/report.py"
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for name in ("lstm", "kokoro", "cuda"):
        assert f"<!-- report.py: {name} -->" in readme, f"README.md lost its {name} table"


def test_readme_is_short():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        n = sum(1 for _ in f)
    assert n <= 250, f"README.md has {n} lines (at most 250: details go to docs/)"


def test_results_hold_only_cited_files():
    report = _report()
    held = sorted(os.listdir(os.path.join(ROOT, "benchmarks", "results")))
    assert held == report.cited(), f"not cited by report.py: {sorted(set(held) - set(report.cited()))}"


# ---- docs/decisions.md: one entry per tunable constant of src/ ----------------------------

SRC = os.path.join(ROOT, "src")
SRC_EXT = (".h", ".c", ".cu", ".cuh", ".def")
#: numeric KL_* defines that are not tunables: flags, enums, ABI versions, formats, limits
#: of the input, -D parameters the host sets per call, platform facts.
NOT_TUNABLE = {
    "KL_AFFINITY", "KL_LINUX", "KL_HAVE_X86", "KL_HAVE_NEON",   # platform switches
    "KL_PACK_BORROW_WIH", "KL_PACK_WIH_PANELS", "KL_POOL_OPENMP_RAN",  # bit flags
    "KL_POOL_AUTO", "KL_POOL_TVM", "KL_ISA_COUNT", "KL_CACHE_KEY_OWNER",  # enums, indices
    "KL_VIEW_MAXD", "KL_CONV_MAX_LEN", "KL_CONV_MAX_PHASES",  # limits of what a call accepts
    "KL_HUGE_PAGE",                                            # the huge page size
    "KL_LCAP", "KL_WT",                                        # NVRTC -D parameters of a call
    "KL_CUDA_COMMON_DEFINES",                                  # how many -D every module has
    "KL_TVM_DENSE_MAXT", "KL_TVM_DENSE_MAXCFG",                # array sizes of the externs' table
    "KL_CONV_MAX_GRID_YZ",                                     # CUDA's grid limit in y and z
}
NOT_TUNABLE_PATTERN = re.compile(r"KL_(ARCH|HWCAP|HWCAP2)_\w+|KL_\w+_(ABI|H|NAME)$")
NUMERIC = re.compile(r"^\(*(\((size_t|int64_t|uint64_t|int)\))?[\d.]+[uUlLf]*(\s*<<\s*\d+)?\)*$")
DEFINE = re.compile(r"^\s*#\s*define\s+(KL_[A-Z0-9_]+)\s+([^/\n]*?)\s*(?:/[/*].*)?$", re.M)


def _src_files():
    for dirpath, dirnames, files in os.walk(SRC):
        for f in files:
            if f.endswith(SRC_EXT):
                yield os.path.join(dirpath, f)


def _src_text():
    text = {}
    for p in _src_files():
        with open(p, encoding="utf-8", errors="replace") as f:
            text[p] = f.read()
    return text


def tunables():
    """{name: value} of every tunable: a KL_* define whose value is a number, outside
    src/kernels, src/tests and src/third_party, and not in NOT_TUNABLE."""
    out = {}
    skip = [os.path.join(SRC, d) + os.sep for d in ("kernels", "tests", "third_party")]
    for p, t in _src_text().items():
        if any(p.startswith(s) for s in skip):
            continue
        for name, value in DEFINE.findall(t):
            if (NUMERIC.match(value) and name not in NOT_TUNABLE
                    and not NOT_TUNABLE_PATTERN.fullmatch(name)):
                out[name] = value
    return out


def decision_entries():
    """The constants each entry of decisions.md names: the backticked names before the
    entry's first ': '."""
    with open(os.path.join(ROOT, "docs", "decisions.md"), encoding="utf-8") as f:
        lines = [ln for ln in f if ln.startswith("- `")]
    names = []
    for ln in lines:
        head = ln.split(": ", 1)[0]
        names += re.findall(r"`([A-Z][A-Z0-9_]+)`", head)
    return names


def test_decisions_name_constants_that_exist():
    names = decision_entries()
    assert len(names) == len(set(names)), \
        f"named by two entries: {sorted({n for n in names if names.count(n) > 1})}"
    src = "\n".join(_src_text().values())
    missing = [n for n in names if not re.search(rf"#\s*define\s+{n}\b|\b{n}\s*=", src)]
    assert not missing, f"docs/decisions.md names constants that src/ does not define: {missing}"


def test_every_tunable_has_a_decision():
    found = tunables()
    assert "KL_SHORT_CALL_ROWS" in found and "KL_DENSE_MIN_MACS" in found, found  # the scan works
    missing = sorted(set(found) - set(decision_entries()))
    assert not missing, (f"tunable constants without an entry in docs/decisions.md: {missing} "
                         "(add one, or list a non-tunable in NOT_TUNABLE with why)")


# ---- paths the docs name ------------------------------------------------------------------

PATH = re.compile(r"(?<![\w/.-])((?:src|kokoro_lstm|tests|benchmarks|docs|tools)/[\w./*-]*[\w*])")


def test_paths_named_in_docs_exist():
    """Every src/, kokoro_lstm/, tests/, benchmarks/, docs/ and tools/ path named in the
    docs exists (globs match something)."""
    bad = []
    for path in DOCS + [os.path.join(ROOT, "benchmarks", "README.md")]:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in PATH.finditer(text):
            if not glob.glob(os.path.join(ROOT, m.group(1))):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{os.path.relpath(path, ROOT)}:{line} {m.group(1)}")
    assert not bad, f"paths that do not exist: {bad}"
