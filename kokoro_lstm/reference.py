"""Plain NumPy float64 LSTM: the test oracle for kokoro_lstm.

Semantics are torch.nn.LSTM's (gate order i, f, g, o; optional projection;
stacked layers; bidirectional; per-sequence lengths with the semantics of
pack_padded_sequence(enforce_sorted=False) -> LSTM -> pad_packed_sequence).

Deliberately simple: one explicit time loop, every value in float64, no
caching, no torch. Speed is not a goal; obvious correctness is.
"""
import numpy as np

__all__ = ["lstm_forward", "lstm"]


def _f64(a, name):
    if a is None:
        return None
    a = np.asarray(a, dtype=np.float64)
    return a


def _sigmoid(x):
    # Stable in both tails: exp() of a non-positive number never overflows.
    # NaN -> NaN, +inf -> 1, -inf -> 0.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _check_shape(a, shape, name):
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {a.shape}")


def _lengths(lengths, T, B):
    if lengths is None:
        return np.full(B, T, dtype=np.int64)
    ln = np.asarray(lengths)
    if ln.ndim != 1 or ln.shape[0] != B:
        raise ValueError(f"lengths: expected shape ({B},), got {ln.shape}")
    if ln.size and not np.issubdtype(ln.dtype, np.integer):
        raise TypeError(f"lengths: expected integers, got dtype {ln.dtype}")
    ln = ln.astype(np.int64)
    if ln.size and (ln.min() < 1 or ln.max() > T):
        raise ValueError(f"lengths: each must be in 1..{T}, got {ln.tolist()}")
    return ln


def lstm_forward(x, w_ih, w_hh, b_ih=None, b_hh=None, h0=None, c0=None, *,
                 reverse=False, lengths=None, batch_first=False, w_hr=None):
    """One layer, one direction of torch.nn.LSTM, in float64.

    x: [T, B, I] ([B, T, I] if batch_first); w_ih: [4H, I]; w_hh: [4H, R]
    with R = P if w_hr ([P, H]) is given else H; h0: [B, R]; c0: [B, H].
    Returns (y [T, B, R] or [B, T, R], h_n [B, R], c_n [B, H]).
    """
    with np.errstate(all="ignore"):
        return _lstm_forward(x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse,
                             lengths, batch_first, w_hr)


def _lstm_forward(x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse, lengths,
                  batch_first, w_hr):
    x = _f64(x, "x")
    if x.ndim != 3:
        raise ValueError(f"x: expected 3-D [T, B, I], got shape {x.shape}")
    if batch_first:
        x = x.transpose(1, 0, 2)
    T, B, I = x.shape
    w_ih = _f64(w_ih, "w_ih")
    w_hh = _f64(w_hh, "w_hh")
    if w_ih.ndim != 2 or w_ih.shape[0] % 4:
        raise ValueError(f"w_ih: expected [4H, I], got shape {w_ih.shape}")
    H = w_ih.shape[0] // 4
    _check_shape(w_ih, (4 * H, I), "w_ih")
    if w_hr is not None:
        w_hr = _f64(w_hr, "w_hr")
        if w_hr.ndim != 2:
            raise ValueError(f"w_hr: expected [P, {H}], got shape {w_hr.shape}")
        R = w_hr.shape[0]
        _check_shape(w_hr, (R, H), "w_hr")
    else:
        R = H
    _check_shape(w_hh, (4 * H, R), "w_hh")
    b = np.zeros(4 * H)
    if b_ih is not None:
        b_ih = _f64(b_ih, "b_ih")
        _check_shape(b_ih, (4 * H,), "b_ih")
        b = b + b_ih
    if b_hh is not None:
        b_hh = _f64(b_hh, "b_hh")
        _check_shape(b_hh, (4 * H,), "b_hh")
        b = b + b_hh
    h = np.zeros((B, R)) if h0 is None else _f64(h0, "h0").copy()
    c = np.zeros((B, H)) if c0 is None else _f64(c0, "c0").copy()
    _check_shape(h, (B, R), "h0")
    _check_shape(c, (B, H), "c0")
    ln = _lengths(lengths, T, B)

    y = np.zeros((T, B, R))
    steps = range(T - 1, -1, -1) if reverse else range(T)
    for t in steps:
        active = (t < ln)[:, None]  # [B, 1]: does sequence b have step t?
        gates = x[t] @ w_ih.T + h @ w_hh.T + b  # [B, 4H]
        i = _sigmoid(gates[:, 0 * H:1 * H])
        f = _sigmoid(gates[:, 1 * H:2 * H])
        g = np.tanh(gates[:, 2 * H:3 * H])
        o = _sigmoid(gates[:, 3 * H:4 * H])
        c_new = f * c + i * g
        h_new = o * np.tanh(c_new)
        if w_hr is not None:
            h_new = h_new @ w_hr.T
        # np.where (not multiplication) so NaN/Inf in skipped steps never leak.
        c = np.where(active, c_new, c)
        h = np.where(active, h_new, h)
        y[t] = np.where(active, h_new, 0.0)
    if batch_first:
        y = y.transpose(1, 0, 2).copy()
    return y, h, c


def lstm(x, params, *, num_layers, bidirectional, hx=None, lengths=None,
         batch_first=False, proj_size=0):
    """The full torch.nn.LSTM forward in float64.

    params: dict with torch state_dict keys weight_ih_l{k}, weight_hh_l{k},
    bias_ih_l{k}, bias_hh_l{k} (biases optional), weight_hr_l{k} (when
    proj_size > 0), each optionally suffixed _reverse. Values may be NumPy
    arrays or anything np.asarray accepts.
    Returns (output, (h_n, c_n)) with torch.nn.LSTM's shapes, in float64.
    """
    x = _f64(x, "x")
    L = int(num_layers)
    D = 2 if bidirectional else 1
    if L < 1:
        raise ValueError(f"num_layers: expected >= 1, got {num_layers}")
    if x.ndim == 2:
        batched = False
        if lengths is not None:
            raise ValueError("lengths: not supported for unbatched (2-D) input")
        x = x[:, None, :]  # [T, 1, I] (batch_first does not apply)
        bf = False
    elif x.ndim == 3:
        batched = True
        bf = batch_first
    else:
        raise ValueError(f"x: expected 2-D or 3-D input, got shape {x.shape}")
    if bf:
        x = x.transpose(1, 0, 2)
    T, B, _ = x.shape

    w0 = np.asarray(params["weight_hh_l0"])
    H = w0.shape[0] // 4
    R = proj_size if proj_size else H
    if proj_size:
        if "weight_hr_l0" not in params:
            raise ValueError("params: proj_size > 0 but weight_hr_l0 missing")

    h0 = c0 = None
    if hx is not None:
        h0, c0 = (_f64(a, n) for a, n in zip(hx, ("h0", "c0")))
        if not batched:
            _check_shape(h0, (L * D, R), "h0")
            _check_shape(c0, (L * D, H), "c0")
            h0, c0 = h0[:, None, :], c0[:, None, :]
        _check_shape(h0, (L * D, B, R), "h0")
        _check_shape(c0, (L * D, B, H), "c0")

    h_n = np.zeros((L * D, B, R))
    c_n = np.zeros((L * D, B, H))
    inp = x
    for k in range(L):
        outs = []
        for d in range(D):
            sfx = f"_l{k}" + ("_reverse" if d else "")
            w_hr = params.get("weight_hr" + sfx) if proj_size else None
            if proj_size and w_hr is None:
                raise ValueError(f"params: missing weight_hr{sfx}")
            idx = k * D + d
            y, hn, cn = lstm_forward(
                inp, params["weight_ih" + sfx], params["weight_hh" + sfx],
                params.get("bias_ih" + sfx), params.get("bias_hh" + sfx),
                None if h0 is None else h0[idx],
                None if c0 is None else c0[idx],
                reverse=bool(d), lengths=lengths, batch_first=False,
                w_hr=w_hr)
            outs.append(y)
            h_n[idx] = hn
            c_n[idx] = cn
        inp = np.concatenate(outs, axis=2) if D == 2 else outs[0]
    out = inp  # [T, B, D*R]
    if not batched:
        return out[:, 0, :].copy(), (h_n[:, 0, :].copy(), c_n[:, 0, :].copy())
    if bf:
        out = out.transpose(1, 0, 2)
    return np.ascontiguousarray(out), (h_n, c_n)
