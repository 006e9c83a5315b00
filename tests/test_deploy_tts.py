"""The whole Kokoro without Python: tests/deploy/kokoro_tts.cc turns token ids, a style
vector and a speed into a WAV file from the artifacts of ``kokoro-lstm port-encoder
--component all`` and ``kokoro-lstm port-decoder`` (the job of kokoro-tvm's Rust
runtime), and its numbers are KModel's.

One random KModel (Kokoro-82M's config; duration head set so that tokens last 2 to 4
frames, see tests/deploy/tts.py) is saved as a .pth and ported with ``--checkpoint``
at small static lengths: 12 tokens (10 used: padding is exercised), and f0n and the
decoder at the exact frame count. The runner runs in a subprocess with no PYTHON*
variables.
"""
import json
import os
import shlex
import shutil
import struct
import subprocess

import numpy as np
import pytest

from conftest import REQUIRE, require

tvm = require("tvm")
torch = require("torch")
require("tvm_ffi")
require("kokoro")

from deploy import tts  # noqa: E402
from deploy.artifacts import TTS_SOURCE, runner_command, runtime_libs  # noqa: E402

N_TOKENS, SEQ_LEN = 10, 12
SEED = 5
TOL = 1e-4


def _missing(msg):
    if REQUIRE:
        pytest.fail(msg + " (KOKORO_LSTM_REQUIRE=1: this test must run)")
    pytest.skip(msg)


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    cxx = shlex.split(os.environ.get("CXX", "")) or ["g++"]
    if not shutil.which(cxx[0]):
        _missing(f"no C++ compiler ({cxx[0]!r} not found; set CXX)")
    incs, libs = runtime_libs()
    exe = tmp_path_factory.mktemp("tts") / "kokoro_tts"
    cmd = runner_command(cxx, exe, incs, libs, source=TTS_SOURCE)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"building the runner failed:\n{' '.join(cmd)}\n{r.stderr}"
    return str(exe)


@pytest.fixture(scope="module")
def model():
    """(KModel, ids, ref_s, pred_dur): durations vary and sit away from rounding ties."""
    m = tts.kmodel(seed=0, frames_per_token=2, jitter=3.0)  # 3 or 4 frames a token
    ids, ref_s = tts.inputs(N_TOKENS, seed=1)
    pred, raw = tts.durations(m, ids, ref_s)
    frac = (raw - raw.floor()).abs()
    assert float((frac - 0.5).abs().min()) > 0.02, f"a duration near a rounding tie: {raw}"
    assert len(set(pred.tolist())) > 1 and int(pred.min()) >= 2, pred
    return m, ids, ref_s, pred


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, model):
    """The folder of port-encoder's artifacts (f0n in its default form, en), the .pth,
    and a second folder whose f0n takes (d, frame_token) (--f0n-input d)."""
    from kokoro_lstm.cli.port_encoder import _Progress, port

    m, _, _, pred = model
    d = tmp_path_factory.mktemp("artifacts")
    ckpt = str(d / "weights.pth")
    tts.save(m, ckpt)
    quiet = _Progress(stream=open(os.devnull, "w"))
    frames = int(pred.sum())
    port(["bert", "duration", "f0n", "text_encoder"], ["auto"], seq_len=SEQ_LEN,
         bert_seq_len=SEQ_LEN, aligned_len=frames, checkpoint=ckpt, output_dir=str(d / "en"),
         num_threads=1, progress=quiet)
    port(["f0n"], ["auto"], seq_len=SEQ_LEN, aligned_len=frames, checkpoint=ckpt,
         output_dir=str(d / "d"), num_threads=1, progress=quiet, f0n_input="d")
    for name in ("bert", "duration", "text_encoder"):
        for ext in ("_compiled.so", "_report.json"):
            os.symlink(d / "en" / (name + ext), d / "d" / (name + ext))
    return d, ckpt


def _write_inputs(d, ids, ref_s):
    tok = d / "ids.txt"
    tok.write_text(",".join(str(int(i)) for i in ids[0]))
    style = d / "ref_s.f32"
    ref_s.numpy().astype("<f4").tofile(style)
    return str(tok), str(style)


def _run(runner, *args, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run([runner, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _trace(d):
    """{name: array} from the runner's --trace folder."""
    out = {}
    for line in (d / "trace.txt").read_text().splitlines():
        name, dtype, *shape = line.split()
        out[name] = np.fromfile(d / f"{name}.bin", dtype="<" + {"float32": "f4",
                                                                  "int64": "i8"}[dtype])
        out[name] = out[name].reshape([int(s) for s in shape])
    return out


def _kmodel_decoder_inputs(m, ids, ref_s, speed=1.0):
    """KModel.forward_with_tokens's decoder inputs (asr, F0, N, style) and durations."""
    seen = {}

    def grab(_mod, args):
        seen["args"] = [a.clone() for a in args]
        raise _Stop

    h = m.decoder.register_forward_pre_hook(grab)
    try:
        m.forward_with_tokens(ids, ref_s, speed)
    except _Stop:
        pass
    finally:
        h.remove()
    return seen["args"]


class _Stop(Exception):
    pass


@pytest.mark.parametrize("form", ["en", "d"])
def test_encoder_half_matches_kmodel(runner, model, artifacts, tmp_path, form):
    """Durations equal, and the decoder's inputs (asr, F0, N) within 1e-4 of KModel's."""
    m, ids, ref_s, pred = model
    folder = artifacts[0] / form
    tok, style = _write_inputs(tmp_path, ids, ref_s)
    tr = tmp_path / "trace"
    tr.mkdir()
    r = _run(runner, folder, "--tokens", "@" + tok, "--style", style, "--encoder-only",
             "--trace", tr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{int(pred.sum())} frames" in r.stdout and "approximate" not in r.stdout, r.stdout
    got = _trace(tr)
    np.testing.assert_array_equal(got["pred_dur"], pred.numpy())
    asr, F0, N, _ = _kmodel_decoder_inputs(m, ids, ref_s)
    for name, want in (("asr", asr), ("F0", F0), ("N", N)):
        want = want.numpy()
        assert got[name].shape == want.shape, (name, got[name].shape, want.shape)
        err = float(np.max(np.abs(got[name] - want)))
        assert err <= TOL * max(1.0, float(np.max(np.abs(want)))), (name, err)


def test_speed_and_padded_frames(runner, model, artifacts, tmp_path):
    """--speed divides the duration sums (KModel's rounding); fewer frames than f0n's
    static length run zero-padded and the runner says the result is approximate."""
    m, ids, ref_s, pred = model
    want, raw = tts.durations(m, ids, ref_s, speed=1.7)
    frac = (raw - raw.floor()).abs()
    assert float((frac - 0.5).abs().min()) > 0.02, raw
    tok, style = _write_inputs(tmp_path, ids, ref_s)
    tr = tmp_path / "trace"
    tr.mkdir()
    r = _run(runner, artifacts[0] / "en", "--tokens", "@" + tok, "--style", style,
             "--encoder-only", "--trace", tr, "--speed", "1.7")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "approximate" in r.stdout and int(want.sum()) < int(pred.sum()), r.stdout
    np.testing.assert_array_equal(_trace(tr)["pred_dur"], want.numpy())


def test_bad_inputs_exit_2(runner, artifacts, tmp_path):
    folder = artifacts[0] / "en"
    style = tmp_path / "ref.f32"
    np.zeros(256, "<f4").tofile(style)
    common = ["--encoder-only", "--trace", tmp_path]
    cases = [
        (["--tokens", ",".join(["1"] * (SEQ_LEN + 1)), "--style", style], "exceed the static"),
        (["--tokens", "0,5,x,0", "--style", style], "bad token id 'x'"),
        (["--tokens", "0,5,0", "--style", tmp_path / "nope.f32"], "cannot open"),
        (["--tokens", "0,5,0", "--style", style, "--speed", "0"], "--speed must be positive"),
        (["--tokens", "0,5,0", "--style", style, "--bogus", "1"], "unknown option --bogus"),
    ]
    short = tmp_path / "short.f32"
    np.zeros(100, "<f4").tofile(short)
    cases.append((["--tokens", "0,5,0", "--style", short], "not a multiple of 256"))
    for args, msg in cases:
        r = _run(runner, folder, *args, *common)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    r = _run(runner, tmp_path / "empty", "--tokens", "0,5,0", "--style", style, *common)
    assert r.returncode == 2 and "bert_report.json" in r.stderr, r.stderr
    r = _run(runner, folder, "--tokens", "0,5,0", "--style", style, "-o", tmp_path / "a.wav")
    assert r.returncode == 2 and "no decoder" in r.stderr, r.stderr


def test_device_errors_exit_2(runner, artifacts, tmp_path):
    """--device: a bad string is a usage error; cuda without a GPU, or on artifacts whose
    report names another target kind, is one line: "no CUDA device: ..." or "{library}
    was compiled for {kind}: run with --device ...", before any library loads."""
    folder = artifacts[0] / "en"
    style = tmp_path / "ref.f32"
    np.zeros(256, "<f4").tofile(style)
    common = ["--tokens", "0,5,0", "--style", style, "--encoder-only", "--trace", tmp_path]
    for bad in ("gpu", "cuda:", "cuda:x", "cuda:-1"):
        r = _run(runner, folder, *common, "--device", bad)
        assert r.returncode == 2 and f"bad --device '{bad}'" in r.stderr, (bad, r.stderr)

    def one_line_error(r, msg):
        lines = r.stderr.splitlines()
        assert r.returncode == 2 and len(lines) == 1 and msg in lines[0], r.stderr

    # on a GPU machine TVM's CUDA runtime loads and the llvm artifacts are refused instead
    gpu = os.path.exists("/dev/nvidiactl")
    one_line_error(_run(runner, folder, *common, "--device", "cuda"),
                   f"{folder}/bert_compiled.so was compiled for llvm: run with --device cpu"
                   if gpu else "kokoro_tts: error: no CUDA device: ")
    # a folder whose duration report says cuda (the libraries are the CPU ones)
    fake = tmp_path / "cuda"
    fake.mkdir()
    for f in os.listdir(folder):
        if f.endswith("_report.json"):
            shutil.copy(folder / f, fake / f)
        else:
            os.symlink(folder / f, fake / f)
    rep = json.loads((fake / "duration_report.json").read_text())
    assert "target_kind" not in rep or rep["target_kind"] == "llvm", rep.get("target_kind")
    rep["target_kind"] = "cuda"
    (fake / "duration_report.json").write_text(json.dumps(rep))
    one_line_error(_run(runner, fake, *common, "--device", "cpu"),
                   f"{fake}/duration_compiled.so was compiled for cuda: run with --device cuda")
    r = _run(runner, folder, *common, "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------------------
# End to end: needs `kokoro-lstm port-decoder` and the counter-based noise
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def decoder(artifacts, model):
    """port-decoder's artifact at the exact frame count, beside the encoder's."""
    try:
        from kokoro_lstm.cli import port_decoder
        from kokoro_lstm import noise  # noqa: F401
    except ImportError as e:
        _missing(f"kokoro-lstm port-decoder or kokoro_lstm.noise is missing ({e})")
    d, ckpt = artifacts
    frames = int(model[3].sum())
    rc = port_decoder.main(["--seq-len", str(frames), "--checkpoint", ckpt, "--output-dir",
                            str(d / "dec"), "--num-threads", "1"])
    assert rc == 0
    libs = [f for f in os.listdir(d / "dec") if f.startswith("decoder_compiled")
            and f.endswith(".so")]
    assert libs, os.listdir(d / "dec")
    for f in os.listdir(d / "dec"):
        if f.startswith("decoder_"):
            for form in ("en", "d"):
                os.symlink(d / "dec" / f, d / form / f)
    return d


def _read_wav(path):
    """(format tag, channels, rate, bits, samples as float) of a RIFF/WAVE file, its
    header checked chunk by chunk."""
    b = open(path, "rb").read()
    assert b[:4] == b"RIFF" and b[8:12] == b"WAVE", b[:12]
    assert struct.unpack("<I", b[4:8])[0] == len(b) - 8
    at, fmt, data = 12, None, None
    while at < len(b):
        cid, size = b[at:at + 4], struct.unpack("<I", b[at + 4:at + 8])[0]
        body = b[at + 8:at + 8 + size]
        if cid == b"fmt ":
            fmt = struct.unpack("<HHIIHH", body[:16])
        elif cid == b"data":
            data = body
        at += 8 + size + (size & 1)
    assert at == len(b) and fmt is not None and data is not None
    tag, ch, rate, byte_rate, block, bits = fmt
    assert byte_rate == rate * block and block == ch * bits // 8
    samples = (np.frombuffer(data, "<f4") if tag == 3 else
               np.frombuffer(data, "<i2").astype(np.float32) / 32767)
    return tag, ch, rate, bits, samples


@pytest.mark.parametrize("form", ["en", "d"])
def test_audio_matches_kmodel(runner, model, decoder, tmp_path, form):
    """The WAV's samples are KModel's audio under the same seeded noise within 1e-4;
    16-bit PCM is that audio clipped and rounded."""
    from kokoro_lstm.noise import counter_noise

    m, ids, ref_s, pred = model
    seed = 1234
    with counter_noise(m, seed):
        want, dur = m.forward_with_tokens(ids, ref_s, 1.0)
    want = want.numpy()
    np.testing.assert_array_equal(dur.numpy(), pred.numpy())
    tok, style = _write_inputs(tmp_path, ids, ref_s)
    out = tmp_path / "a.wav"
    r = _run(runner, decoder / form, "--tokens", "@" + tok, "--style", style, "-o", out,
             "--seed", seed, "--float")
    assert r.returncode == 0 and "approximate" not in r.stdout, r.stdout + r.stderr
    tag, ch, rate, bits, got = _read_wav(out)
    assert (tag, ch, rate, bits) == (3, 1, tts.SAMPLE_RATE, 32)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.isfinite(got).all()
    assert float(np.max(np.abs(got - want))) <= TOL
    pcm = tmp_path / "b.wav"
    r = _run(runner, decoder / form, "--tokens", "@" + tok, "--style", style, "-o", pcm,
             "--seed", seed)
    assert r.returncode == 0, r.stdout + r.stderr
    tag, ch, rate, bits, got16 = _read_wav(pcm)
    assert (tag, ch, rate, bits) == (1, 1, tts.SAMPLE_RATE, 16)
    assert float(np.max(np.abs(got16 - np.clip(want, -1, 1)))) <= 1.0 / 32767 + TOL


def test_fresh_noise_without_seed(runner, model, decoder, tmp_path):
    """Without --seed the decoder draws fresh noise: two calls differ, same length."""
    _, ids, ref_s, _ = model
    tok, style = _write_inputs(tmp_path, ids, ref_s)
    outs = []
    for k in range(2):
        out = tmp_path / f"{k}.wav"
        r = _run(runner, decoder / "en", "--tokens", "@" + tok, "--style", style, "-o", out,
                 "--float")
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append(_read_wav(out)[4])
    assert outs[0].shape == outs[1].shape and not np.array_equal(outs[0], outs[1])
