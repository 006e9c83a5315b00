/* Template: the float32 vector math of the SIMD kernels, written once. An ISA's
 * <isa>-math.h maps the vector type and operations, then includes this file,
 * which defines kl_<isa>_exp, _clamp, _sigmoid, _tanh, _sinsq and _cell_update:
 *   KL_VF               the vector type;  KL_VNAME(name)  kl_<isa>_##name
 *   KL_VSET1(s)         broadcast;  KL_VADD, KL_VSUB, KL_VMUL, KL_VDIV, KL_VMIN, KL_VMAX
 *   KL_VNEG(x)          -x;  KL_VFMADD(a, b, c) a*b + c, KL_VFNMADD(a, b, c) c - a*b (fused)
 *   KL_VROUND(x)        to the nearest integer, ties to even
 *   KL_VSCALE(p, n)     p * 2^n for integral n in [-126, 128] (2^128: inf)
 *   KL_VLOADU, KL_VSTOREU
 * The mappings are undefined at the end. */

/* exp(x) for x already clamped; Cephes-style polynomial, ~1 ulp. NaN stays NaN. */
KL_INLINE KL_VF KL_VNAME(exp)(KL_VF x) {
  const KL_VF n = KL_VROUND(KL_VMUL(x, KL_VSET1(1.44269504088896341f)));
  KL_VF r = KL_VFNMADD(n, KL_VSET1(0.693359375f), x);
  r = KL_VFNMADD(n, KL_VSET1(-2.12194440e-4f), r);
  KL_VF p = KL_VSET1(1.9875691500e-4f);
  p = KL_VFMADD(p, r, KL_VSET1(1.3981999507e-3f));
  p = KL_VFMADD(p, r, KL_VSET1(8.3334519073e-3f));
  p = KL_VFMADD(p, r, KL_VSET1(4.1665795894e-2f));
  p = KL_VFMADD(p, r, KL_VSET1(1.6666665459e-1f));
  p = KL_VFMADD(p, r, KL_VSET1(5.0000001201e-1f));
  p = KL_VFMADD(p, KL_VMUL(r, r), KL_VADD(r, KL_VSET1(1.0f)));
  return KL_VSCALE(p, n);
}

/* Clamp keeping NaN (the min/max mappings return NaN when x is NaN). */
KL_INLINE KL_VF KL_VNAME(clamp)(KL_VF x, float lo, float hi) {
  return KL_VMIN(KL_VSET1(hi), KL_VMAX(KL_VSET1(lo), x));
}

KL_INLINE KL_VF KL_VNAME(sigmoid)(KL_VF x) {
  const KL_VF e = KL_VNAME(exp)(KL_VNAME(clamp)(KL_VNEG(x), -87.0f, 89.0f));
  return KL_VDIV(KL_VSET1(1.0f), KL_VADD(KL_VSET1(1.0f), e));
}

/* tanh(x) = 1 - 2 / (1 + exp(2x)) */
KL_INLINE KL_VF KL_VNAME(tanh)(KL_VF x) {
  const KL_VF e = KL_VNAME(exp)(KL_VNAME(clamp)(KL_VADD(x, x), -87.0f, 89.0f));
  const KL_VF q = KL_VDIV(KL_VSET1(2.0f), KL_VADD(KL_VSET1(1.0f), e));
  return KL_VSUB(KL_VSET1(1.0f), q);
}

/* sin(x)^2 for |x| <= KL_SINSQ_RANGE (internal.h; beyond it, and for inf and NaN, the kernels
 * take libm's sinf). sin^2 has period pi: x = q pi + r with pi in four parts
 * (q pi exact for such q), then sin(r) = r + r^3 P(r^2) on [-pi/2, pi/2]; within
 * 6 ulp of sin(x)^2 over the range (tests/c/test_kernels_vector.c). */
KL_INLINE KL_VF KL_VNAME(sinsq)(KL_VF x) {
  const KL_VF q = KL_VROUND(KL_VMUL(x, KL_VSET1(0.318309886183790671538f)));
  KL_VF r = KL_VFNMADD(q, KL_VSET1(3.140625f), x);
  r = KL_VFNMADD(q, KL_VSET1(9.670257568359375e-4f), r);
  r = KL_VFNMADD(q, KL_VSET1(6.2771141529083251953e-7f), r);
  r = KL_VFNMADD(q, KL_VSET1(1.2154201256553420762e-10f), r);
  const KL_VF s = KL_VMUL(r, r);
  KL_VF p = KL_VSET1(2.605801228128257e-6f);
  p = KL_VFMADD(p, s, KL_VSET1(-1.980961242225021e-4f));
  p = KL_VFMADD(p, s, KL_VSET1(8.33306647837162e-3f));
  p = KL_VFMADD(p, s, KL_VSET1(-0.16666659712791443f));
  const KL_VF sn = KL_VFMADD(KL_VMUL(r, s), p, r);
  return KL_VMUL(sn, sn);
}

/* Gate epilogue for one row and one vector of units starting at u:
 * acc[g] = (W_hh h)[g] for the gates i, f, g, o. */
KL_INLINE void KL_VNAME(cell_update)(const KL_VF acc[4], const float* gx, const float* bias,
                                     size_t Hp, size_t u, float* c, float* h_out) {
  KL_VF pre[4];
  _Pragma("GCC unroll 8")
  for (int g = 0; g < 4; g++)
    pre[g] = KL_VADD(KL_VADD(acc[g], KL_VLOADU(gx + g * Hp + u)), KL_VLOADU(bias + g * Hp + u));
  const KL_VF i = KL_VNAME(sigmoid)(pre[0]);
  const KL_VF f = KL_VNAME(sigmoid)(pre[1]);
  const KL_VF gg = KL_VNAME(tanh)(pre[2]);
  const KL_VF o = KL_VNAME(sigmoid)(pre[3]);
  const KL_VF cn = KL_VFMADD(f, KL_VLOADU(c + u), KL_VMUL(i, gg));
  KL_VSTOREU(c + u, cn);
  KL_VSTOREU(h_out + u, KL_VMUL(o, KL_VNAME(tanh)(cn)));
}

#undef KL_VF
#undef KL_VNAME
#undef KL_VSET1
#undef KL_VADD
#undef KL_VSUB
#undef KL_VMUL
#undef KL_VDIV
#undef KL_VMIN
#undef KL_VMAX
#undef KL_VNEG
#undef KL_VFMADD
#undef KL_VFNMADD
#undef KL_VROUND
#undef KL_VSCALE
#undef KL_VLOADU
#undef KL_VSTOREU
