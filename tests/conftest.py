"""Shared test configuration.

KOKORO_LSTM_REQUIRE=1 (set by .ci/run) turns a missing optional dependency
(torch, tvm, onnxruntime) into an error instead of a skip, so CI can never
pass by skipping. Tests marked ``slow`` run when CI or KOKORO_LSTM_SLOW is set.
"""
import importlib
import os
import warnings

import pytest

REQUIRE = os.environ.get("KOKORO_LSTM_REQUIRE", "") not in ("", "0")
# Thread counts are capped at the usable cores; the tests ask for up to 4 threads to
# check that results do not depend on the count, also on 1- and 2-core machines.
os.environ.setdefault("KOKORO_LSTM_MAX_THREADS", "8")

RUN_SLOW = REQUIRE or os.environ.get("CI", "") not in ("", "0", "false") or \
    os.environ.get("KOKORO_LSTM_SLOW", "") not in ("", "0")


def require(modname):
    """Import an optional dependency: skip locally when missing, fail in CI."""
    if REQUIRE:
        return importlib.import_module(modname)
    try:
        return importlib.import_module(modname)
    except ImportError as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"{modname} not installed ({e})", allow_module_level=True)


# The CPU set this process started with. TVM's thread pool pins the thread that runs a
# parallel module to one CPU and leaves it there; every later subprocess (timed calls,
# Ctrl-C tests) would inherit that single CPU.
_CPUS = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None


@pytest.fixture(autouse=True)
def _cpu_set_back():
    yield
    if _CPUS is not None and os.sched_getaffinity(0) != _CPUS:
        os.sched_setaffinity(0, _CPUS)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long cases; always run in CI")


def pytest_collection_modifyitems(config, items):
    if RUN_SLOW:
        return
    skip = pytest.mark.skip(reason="slow: set KOKORO_LSTM_SLOW=1 (always on in CI)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# Kokoro-82M's encoder config (the `kokoro` package's real modules, random init)
HIDDEN, STYLE, NLAYER, MAX_DUR, N_TOKEN, KERNEL, DROPOUT = 512, 128, 3, 50, 178, 5, 0.2


@pytest.fixture(scope="module")
def km():
    """kokoro.modules (its import warns about weight_norm and dropout)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return require("kokoro.modules")
