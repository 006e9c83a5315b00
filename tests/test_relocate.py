"""Exported libraries are relocatable: a native LSTM library, exported each way (TVM's
plain ``ex.export_library`` + ``kt.copy_blas``, ``kt.export_library`` of a module that
carries the engine and of one that does not), names no path in its ``NEEDED`` list, and
copied with what ships beside it (the BLAS file) into another folder it loads and runs
in a process that cannot import kokoro_lstm or scipy_openblas32, with no
LD_LIBRARY_PATH, taking the BLAS beside it; where mount namespaces work, also with the
installed BLAS hidden, as on a machine that has only TVM's runtime."""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from conftest import require

torch = require("torch")
tvm = require("tvm")
from tvm import relax  # noqa: E402

import kokoro_lstm.tvm as kt  # noqa: E402
from kokoro_lstm.tvm import _link  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF, Linux only")

# Loads {folder}/{name}.so and checks its outputs against {folder}/{name}.npz, with
# kokoro_lstm and scipy_openblas32 blocked; prints the BLAS files the process mapped.
_RUN = """
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("kokoro_lstm", "scipy_openblas32"):
            raise ImportError(name + " is blocked in this process")
sys.meta_path.insert(0, _Block())
import numpy as np, tvm
from tvm import relax
folder, name, soname = sys.argv[1:4]
d = np.load(f"{folder}/{name}.npz")
ins = [d[k] for k in sorted(d.files) if k.startswith("in")]
exp = [d[k] for k in sorted(d.files) if k.startswith("out")]
vm = relax.VirtualMachine(tvm.runtime.load_module(f"{folder}/{name}.so"), tvm.cpu())
got = [r.numpy() for r in vm["main"](*[tvm.runtime.tensor(a) for a in ins])]
assert len(got) == len(exp) and all(np.array_equal(g, e) for g, e in zip(got, exp)), name
with open("/proc/self/maps") as f:
    blas = sorted({l.split()[-1] for l in f if l.rstrip().endswith("/" + soname)})
print("ok", *blas)
"""


def _env():
    """This environment without LD_LIBRARY_PATH and PYTHON* (no path to the source tree)."""
    return {k: v for k, v in os.environ.items()
            if k != "LD_LIBRARY_PATH" and not k.startswith("PYTHON")}


def _run(folder, name, prefix=(), **env):
    return subprocess.run([*prefix, sys.executable, "-c", textwrap.dedent(_RUN), str(folder),
                           name, _link.blas_library()[0]], cwd=tempfile.gettempdir(),
                          env=dict(_env(), **env), capture_output=True, text=True, timeout=300)


def _needed_and_paths(so):
    """(NEEDED entries, RPATH/RUNPATH entries) of ``so`` (readelf -d)."""
    out = subprocess.run(["readelf", "-d", str(so)], check=True, capture_output=True,
                         text=True).stdout
    needed, paths = [], []
    for line in out.splitlines():
        if "[" not in line:
            continue
        value = line[line.index("[") + 1:line.rindex("]")]
        if "(NEEDED)" in line:
            needed.append(value)
        elif "(RUNPATH)" in line or "(RPATH)" in line:
            paths += value.split(":")
    return needed, paths


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{name: folder holding name.so, what ships with it and name.npz (inputs and this
    process's outputs)}: one folder per export path."""
    torch.manual_seed(0)
    model = torch.nn.LSTM(8, 16, num_layers=2, bidirectional=True).eval()
    x = torch.randn(5, 2, 8)
    ep = torch.export.export(model, (x,))
    with torch.no_grad():
        want = [t.numpy() for t in (model(x)[0], *model(x)[1])]
    attached = tvm.compile(kt.from_exported_program(ep, lstm_method="native"), target="llvm")
    bare_mod = tvm.relax.frontend.torch.from_exported_program(
        ep.run_decompositions(kt.decomposition_table()),
        custom_convert_map=kt.convert_map("native"), run_ep_decomposition=False)
    bare = tvm.compile(bare_mod, target="llvm")
    from kokoro_lstm.tvm._link import carries_engine

    assert carries_engine(attached.mod) and not carries_engine(bare.mod)
    folders = {}
    for name, ex, export in (
            ("plain", attached, lambda ex, p: (ex.export_library(str(p)), kt.copy_blas(p.parent))),
            ("kt", attached, kt.export_library),
            ("kt_bare", bare, kt.export_library)):
        folder = tmp_path_factory.mktemp(name)
        export(ex, folder / f"{name}.so")
        got = [r.numpy() for r in relax.VirtualMachine(ex, tvm.cpu())["main"](
            tvm.runtime.tensor(x.numpy()))]
        for g, w in zip(got, want):
            assert g.shape == w.shape and np.abs(g - w).max() <= 1e-5, name
        np.savez(folder / f"{name}.npz", in0=x.numpy(),
                 **{f"out{k}": g for k, g in enumerate(got)})
        folders[name] = folder
    return folders


def _relocated(folder, tmp_path):
    """``folder`` copied (the library, the BLAS beside it, the case) into a new folder."""
    dest = tmp_path / "elsewhere" / folder.name
    shutil.copytree(folder, dest)
    return dest


@pytest.mark.parametrize("name", ["plain", "kt", "kt_bare"])
def test_artifact_needs_no_path_and_runs_relocated(exported, name, tmp_path):
    """No path in NEEDED (nor RUNPATH); the copy runs without kokoro_lstm,
    scipy_openblas32 or LD_LIBRARY_PATH, with the BLAS file copied beside it."""
    soname = _link.blas_library()[0]
    assert sorted(os.listdir(exported[name])) == sorted([f"{name}.so", f"{name}.npz", soname])
    needed, paths = _needed_and_paths(exported[name] / f"{name}.so")
    assert needed and not [n for n in needed if "/" in n], needed
    assert not [n for n in needed if "blas" in n], needed  # found by the loader, not ld.so
    assert not paths, paths
    dest = _relocated(exported[name], tmp_path)
    r = _run(dest, name)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["ok", str(dest / soname)], r.stdout  # the copy beside it


def test_artifact_takes_the_blas_already_loaded(exported, tmp_path):
    """In a process that has the BLAS (here: kokoro_lstm imported), a relocated library
    uses that one: one OpenBLAS per process, whose thread count the engine sets."""
    soname = _link.blas_library()[0]
    dest = _relocated(exported["kt"], tmp_path)
    d = np.load(dest / "kt.npz")
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(dest / "kt.so")), tvm.cpu())
    got = [r.numpy() for r in vm["main"](tvm.runtime.tensor(d["in0"]))]
    assert all(np.array_equal(g, d[f"out{k}"]) for k, g in enumerate(got))
    want = os.path.realpath(_link.blas_library()[1])  # the system's soname is a link
    with open("/proc/self/maps") as f:
        mapped = {line.split()[-1] for line in f if "/" in line}
    blas = {p for p in mapped if os.path.basename(p) in (soname, os.path.basename(want))}
    assert blas == {want}, blas


def _hiding(path, empty):
    """A command prefix running its command with the folder ``path`` hidden (the empty
    folder ``empty`` mounted over it in a new mount namespace), or None where that is
    not allowed."""
    for ns in (["-m"], ["-Urm"]):
        prefix = ["unshare", *ns, "--propagation", "private", "--", "sh", "-ec",
                  'mount --bind "$1" "$2"; shift 2; exec "$@"', "sh", empty, path]
        try:
            r = subprocess.run(prefix + ["ls", "-A", path], capture_output=True, text=True,
                               timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if r.returncode == 0 and not r.stdout.strip():
            return prefix
    return None


def test_artifact_runs_where_the_blas_is_not_installed(exported, tmp_path):
    """The installed BLAS hidden, as on a machine with only TVM's runtime: the copy runs
    with the BLAS beside it, or in a folder LD_LIBRARY_PATH names (tools/gpu_deploy.py's
    layout); without either, the load says which file to copy beside it and a call that
    needs it stops with the same line."""
    soname, installed = _link.blas_library()
    (tmp_path / "empty").mkdir()
    prefix = _hiding(os.path.dirname(installed), str(tmp_path / "empty"))
    if prefix is None:
        pytest.skip("no mount namespace here (unshare -m / -Urm): the other tests check the "
                    "BLAS is taken from beside the library")
    dest = _relocated(exported["kt"], tmp_path)
    r = _run(dest, "kt", prefix)
    assert r.returncode == 0 and r.stdout.split() == ["ok", str(dest / soname)], \
        r.stdout + r.stderr
    (tmp_path / "blas").mkdir()
    os.rename(dest / soname, tmp_path / "blas" / soname)
    r = _run(dest, "kt", prefix, LD_LIBRARY_PATH=str(tmp_path / "blas"))
    assert r.returncode == 0 and r.stdout.split() == ["ok", str(tmp_path / "blas" / soname)], \
        r.stdout + r.stderr
    r = _run(dest, "kt", prefix)
    assert r.returncode != 0, r.stdout + r.stderr
    line = f"kokoro_lstm engine in {dest / 'kt.so'}: {soname} not found"
    assert line in r.stderr and "copy it beside the library" in r.stderr, r.stderr


def test_blas_loader_compiles_warning_free(tmp_path):
    """blas_loader.c under -Wall -Wextra -Wpedantic -Werror, for both BLAS kinds, a path
    with quotes and backslashes included; its entry points are hidden."""
    from tvm.support import cc

    for prefix, soname in (("scipy_", "libscipy_openblas.so"), ("", "libopenblas.so.0")):
        out = tmp_path / f"loader{prefix}.o"
        cmd = _link.loader_command(cc.get_cc(), str(out), soname, '/a "b"\\c/' + soname, prefix,
                                   ["-Wall", "-Wextra", "-Wpedantic", "-Werror"])
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr, r.stderr
        syms = subprocess.run(["readelf", "-sW", str(out)], capture_output=True, text=True,
                              check=True).stdout
        for f in _link.LOADER_FUNCTIONS:
            line = next(s for s in syms.splitlines() if s.endswith(" " + prefix + f))
            assert " HIDDEN " in line, line


def _gpu_deploy():
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "tools", "gpu_deploy.py")
    spec = importlib.util.spec_from_file_location("gpu_deploy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_deploy_ships_every_library(exported, tmp_path):
    """tools/gpu_deploy.py's list of what to ship: a library needed by absolute path and
    one needed by name (ldd's two line forms), and the engine's BLAS, which the
    artifact names nowhere (its loader finds it)."""
    from tvm.support import cc

    gd = _gpu_deploy()
    src = tmp_path / "empty.c"
    src.write_text("int kl_dep(void) { return 1; }\n")
    by_path, by_name = tmp_path / "libklpath.so", tmp_path / "libklname.so"
    compiler = cc.get_cc().split()
    for lib, soname in ((by_path, str(by_path)), (by_name, by_name.name)):
        subprocess.run(compiler + ["-shared", "-fPIC", "-x", "c", str(src), "-o", str(lib),
                                   f"-Wl,-soname,{soname}"], check=True)
    top = tmp_path / "top.so"
    subprocess.run(compiler + ["-shared", "-fPIC", "-x", "c", str(src), "-x", "none", "-o",
                               str(top), "-Wl,--no-as-needed", str(by_path), f"-L{tmp_path}",
                               "-lklname", f"-Wl,-rpath,{tmp_path}"], check=True)
    assert _needed_and_paths(top)[0][:2] == [str(by_path), by_name.name]
    assert gd._needed_libs(str(top)) == {by_path.name: str(by_path), by_name.name: str(by_name)}
    os.unlink(by_name)
    with pytest.raises(SystemExit, match="libklname.so, which is not found"):
        gd._needed_libs(str(top))

    class _Engine:  # what kt.uses_engine reads
        def as_text(self):
            return "kokoro_lstm.lstm_forward_v2"

    soname, path = _link.blas_library()
    assert gd.shipped_libs(str(exported["kt"] / "kt.so"), _Engine()) == {soname: path}


def test_cpp_runner_runs_the_relocated_folder(exported, tmp_path):
    """No Python where it runs: tests/deploy/run_artifact.cc, built against copies of
    TVM's runtime libraries in a folder of their own, runs a relocated library, which
    takes the BLAS beside it (the installed BLAS hidden where mount namespaces work)."""
    import shlex

    from conftest import REQUIRE

    sys.path.insert(0, os.path.dirname(__file__))
    from deploy.artifacts import runner_command, runtime_libs, write_manifest

    cxx = shlex.split(os.environ.get("CXX", "")) or ["g++"]
    if not shutil.which(cxx[0]):
        msg = f"no C++ compiler ({cxx[0]!r}; set CXX) for tests/deploy/run_artifact.cc"
        if REQUIRE:
            pytest.fail(msg + " (KOKORO_LSTM_REQUIRE=1: this test must run)")
        pytest.skip(msg)
    runtime = tmp_path / "tvm-runtime"
    runtime.mkdir()
    incs, libs = runtime_libs()
    copies = [shutil.copy2(p, runtime) for p in libs]
    exe = runtime / "run_artifact"
    cmd = runner_command(cxx, exe, incs, copies, rpath=False) + ["-Wl,-rpath,$ORIGIN"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"building the runner failed:\n{' '.join(cmd)}\n{r.stderr}"
    soname, installed = _link.blas_library()
    dest = _relocated(exported["kt"], tmp_path)
    d = np.load(dest / "kt.npz")
    manifest = write_manifest(str(dest), [d["in0"]],
                              [d[k] for k in sorted(d.files) if k.startswith("out")])
    (tmp_path / "empty").mkdir()
    prefix = _hiding(os.path.dirname(installed), str(tmp_path / "empty")) or []
    r = subprocess.run([*prefix, str(exe), str(dest / "kt.so"), "main", manifest, "0"],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
