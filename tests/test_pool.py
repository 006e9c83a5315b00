"""Which threads run a parallel call: the engine's own pool, or, when the process has
GNU OpenMP loaded (PyTorch's CPU runtime), that runtime's team, so the two never
compete for the cores. Either way the results are the same bit for bit. Each case
runs in a fresh interpreter: the choice is made per process."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import require

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the OpenMP route is Linux-only")

# A bidirectional call large enough to run on 2 threads; prints the output's bytes
# (hex of a float64 sum is not enough: the whole array) and the pool counters.
CALL = """
import json, sys, numpy as np, kokoro_lstm
from kokoro_lstm import _core
def call():
    rng = np.random.default_rng(0)
    shapes = kokoro_lstm.LSTM(48, 32, bidirectional=True).state_dict()
    lstm = kokoro_lstm.LSTM.from_state_dict(
        {k: rng.uniform(-0.3, 0.3, v.shape).astype(np.float32) for k, v in shapes.items()},
        num_threads=2)
    x = rng.standard_normal((96, 1, 48), dtype=np.float32)
    return lstm(x)[0]
"""


def _run(body, env=None, timeout=120):
    code = f"TESTS = {os.path.dirname(os.path.abspath(__file__))!r}\n" + textwrap.dedent(CALL) + \
        textwrap.dedent(body)
    full_env = {k: v for k, v in os.environ.items() if k != "KOKORO_LSTM_POOL"}
    full_env.update(env or {})
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=full_env, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


AFTER_TORCH = """
import torch
torch.set_num_threads(2)
torch.nn.functional.conv1d(torch.randn(1, 64, 512), torch.randn(64, 64, 5))  # starts the team
y = call()
print(json.dumps(dict(_core.pool_info(), y=y.tobytes().hex())))
"""


def test_without_openmp_the_own_pool_runs():
    out = _run("""
    y = call()
    print(json.dumps(dict(_core.pool_info(), y=y.tobytes().hex())))
    """)
    assert out["pool"] == "own" and out["openmp"] is None
    assert out["jobs_own"] > 0 and out["jobs_openmp"] == 0


def test_the_calling_thread_gets_its_cpu_set_back():
    """The caller runs its share pinned to the CPU the workers leave free, and its
    own CPU set (here a user's restriction to two CPUs) is back after the call."""
    out = _run("""
    import os
    # from every CPU (the parent may be pinned: TVM's pool pins its main thread)
    os.sched_setaffinity(0, range(os.cpu_count()))
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cpus[-2:])
    before = sorted(os.sched_getaffinity(0))
    y1 = call()
    after = sorted(os.sched_getaffinity(0))
    os.environ["KOKORO_LSTM_PIN"] = "0"
    y2 = call()
    print(json.dumps(dict(_core.pool_info(), before=before, after=after,
                          same=y1.tobytes() == y2.tobytes())))
    """)
    assert out["jobs_own"] >= 2
    assert out["before"] == out["after"] and len(out["before"]) == 2
    assert out["same"]


def test_next_to_torch_the_openmp_team_runs_it_with_the_same_bits():
    require("torch")
    own = _run(AFTER_TORCH, env={"KOKORO_LSTM_POOL": "own"})
    omp = _run(AFTER_TORCH)
    assert own["pool"] == "own" and own["jobs_openmp"] == 0 and own["jobs_own"] > 0
    assert omp["pool"] == "openmp" and "libgomp" in os.path.basename(omp["openmp"])
    assert omp["jobs_openmp"] > 0 and omp["jobs_own"] == 0
    assert omp["y"] == own["y"]


def test_on_the_openmp_team_every_member_gets_its_cpu_set_back():
    """libgomp's members run their share pinned to one CPU each (a member woken from its
    sleep had landed on the caller's CPU); afterwards every thread of the process has
    the CPU set it had before."""
    require("torch")
    sets = ("import glob\n"
            "def cpu_sets():\n"
            "    return sorted({open(f).read().split('Cpus_allowed_list:')[1].split()[0]\n"
            "                   for f in glob.glob('/proc/self/task/*/status')})\n"
            "before = cpu_sets()\n")
    out = _run(sets + AFTER_TORCH.replace("y=y.tobytes().hex()",
                                          "before=before, after=cpu_sets()"))
    assert out["pool"] == "openmp" and out["jobs_openmp"] > 0
    assert out["before"] == out["after"] and len(out["after"]) == 1, out


def test_the_pool_choice_is_a_parameter_with_the_environment_as_default():
    """set_pool beats KOKORO_LSTM_POOL / KOKORO_LSTM_PIN either way; same bits."""
    require("torch")
    choose = """
from kokoro_lstm import _threads
_threads.set_pool({pool!r}, pin={pin!r})
""" + AFTER_TORCH
    own = _run(choose.format(pool="own", pin=False))
    auto = _run(choose.format(pool="auto", pin=None), env={"KOKORO_LSTM_POOL": "own"})
    default = _run(choose.format(pool=None, pin=None),
                   env={"KOKORO_LSTM_POOL": "own", "KOKORO_LSTM_PIN": "0"})
    assert own["pool"] == "own" and own["jobs_openmp"] == 0 and own["jobs_own"] > 0
    assert not own["foreign"] and not own["pin"]
    assert auto["pool"] == "openmp" and auto["jobs_openmp"] > 0 and auto["jobs_own"] == 0
    assert auto["foreign"] and auto["pin"]
    assert default["pool"] == "own" and not default["foreign"] and not default["pin"]
    assert own["y"] == auto["y"] == default["y"]


def test_a_team_smaller_than_the_call_falls_back_to_the_own_pool():
    """OMP_THREAD_LIMIT=1: libgomp gives a team of one, so nothing of the job runs
    there and the whole job runs on the engine's pool."""
    require("torch")
    ref = _run(AFTER_TORCH, env={"KOKORO_LSTM_POOL": "own"})
    out = _run(AFTER_TORCH, env={"OMP_THREAD_LIMIT": "1"})
    assert out["pool"] == "openmp" and out["jobs_openmp"] == 0 and out["jobs_own"] > 0
    assert out["y"] == ref["y"]


def test_a_forked_child_uses_the_own_pool():
    """libgomp's team does not survive fork (a parallel region in the child would wait
    for threads that do not exist there): the child runs on the engine's pool."""
    require("torch")
    out = _run(AFTER_TORCH.replace("print(", "parent = dict(_core.pool_info(), y=y.tobytes().hex())\n#") + """
sys.path.insert(0, TESTS)
from _forking import run_in_fork
def in_child():
    y = call().tobytes().hex()
    return json.dumps(dict(_core.pool_info(), y=y)).encode()
child = json.loads(run_in_fork(in_child))
print(json.dumps(dict(parent=parent, child=child, again=call().tobytes().hex())))
""")
    assert out["parent"]["pool"] == "openmp" and out["parent"]["jobs_openmp"] > 0
    assert out["child"]["pool"] == "own" and out["child"]["jobs_own"] > 0
    assert out["child"]["y"] == out["parent"]["y"] == out["again"]



# A native-lowered TVM module: the engine is called by TVM's VM (a tvm-ffi function),
# so its parallel work runs on TVM's own pool, the one the module's loops run on.
IN_TVM = """
import torch, tvm
from tvm import relax
import kokoro_lstm.tvm as kt
kokoro_lstm.set_num_threads(2)
torch.manual_seed(0)
m = torch.nn.LSTM(48, 32, bidirectional=True).eval()
x = torch.randn(96, 1, 48)
mod = kt.from_exported_program(torch.export.export(m, (x,)), lstm_method="native")
vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
before = _core.pool_info()
y = vm["main"](tvm.runtime.tensor(x.numpy()))[0].numpy()
after = _core.pool_info()
with torch.no_grad():
    err = float((torch.from_numpy(y) - m(x)[0]).abs().max())
print(json.dumps({k: after[k] - before[k] for k in ("jobs_own", "jobs_openmp", "jobs_tvm")}
                 | {"y": y.tobytes().hex(), "err": err}))
"""


def test_called_by_tvm_the_tvm_pool_runs_it_with_the_same_bits():
    require("torch")
    require("tvm")
    own = _run(IN_TVM, env={"KOKORO_LSTM_POOL": "own", "TVM_NUM_THREADS": "2"}, timeout=300)
    out = _run(IN_TVM, env={"TVM_NUM_THREADS": "2"}, timeout=300)
    assert own["jobs_tvm"] == 0 and own["jobs_openmp"] == 0 and own["jobs_own"] > 0
    assert out["jobs_tvm"] > 0 and out["jobs_own"] == 0 and out["jobs_openmp"] == 0
    assert out["y"] == own["y"] and out["err"] < 1e-5


def test_a_tvm_pool_smaller_than_the_call_is_not_used():
    """TVM_NUM_THREADS=1 < the call's 2 threads: no task of the job runs on TVM's pool;
    the job runs where an ordinary call would (libgomp's team: torch is loaded)."""
    require("torch")
    require("tvm")
    ref = _run(IN_TVM, env={"KOKORO_LSTM_POOL": "own", "TVM_NUM_THREADS": "2"}, timeout=300)
    out = _run(IN_TVM, env={"TVM_NUM_THREADS": "1"}, timeout=300)
    assert out["jobs_tvm"] == 0 and out["jobs_openmp"] > 0
    assert out["y"] == ref["y"]
