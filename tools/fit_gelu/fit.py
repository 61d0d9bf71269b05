"""Coefficients of gelu_v's erfc (Note [Explicit gelu at the vector levels] in
plugins/cpu/src/vec_kernels_isa.cpp). Run: python3 fit.py (numpy; about a minute).

m(a) = a Phi(-a) = a erfc(a/sqrt2)/2 = g(a) E(a), a = |x| in [0, 14.5]:
  g(a) = a P(a) / Q(a)   (rational, P degree 4, Q degree 5, Q(0) = 1; minimax relative error)
  E(a) = 2^k e^(rho/2) as computed by the kernel: k = multiple of 2^-B nearest -a^2/(2 ln2),
  rho = -a^2 - k * 2L with 2L = float(2 ln2). The kernel's E equals e^(-a^2/2) exp(-k (L - ln2)),
  k ~ -a^2/(2 ln2): the smooth factor exp(a^2 (L - ln2)/(2 ln2)) (up to 2.9e-7 at a = 14.5) is
  divided out of the target of g (the sawtooth rest, |dk| (L - ln2) < 6e-11, is negligible).
  e^(rho/2) ~ 1 + rho (c1 + c2 rho [+ c3 rho^2]) on |rho| <= ln2 / 2^B (+ margin), minimax relative.
Uses numpy only (float64 erfc from math is exact enough: ~1e-16 against a 1e-8 fit).
"""
import numpy as np, math, struct

def f32(v): return struct.unpack('f', struct.pack('f', v))[0]
LN2 = math.log(2.0)
L = f32(2*LN2)/2          # the kernel multiplies k by float(2 ln2)

def target(a):
    r = np.array([0.5*math.erfc(v/math.sqrt(2))*math.exp(v*v/2) for v in a])   # Phi(-a) e^(a^2/2)
    return r*np.exp(-a*a*(L-LN2)/(2*LN2))   # so that g * E_kernel = a Phi(-a)

def ratfit(n, m, A, iters=300, N=8000):
    u = np.linspace(0, 1, N)
    a = np.unique(np.concatenate([A*(1-np.cos(np.pi*u))/2, np.linspace(0, A, N)]))
    f = target(a); v = a/A
    Vn = np.vander(v, n+1, increasing=True); Vm = np.vander(v, m+1, increasing=True)
    w = np.ones_like(a)/len(a); Qp = np.ones_like(a); best = None
    for it in range(iters):   # Loeb / Sanathanan-Koerner linearisation with Lawson weights
        M = np.hstack([Vn, -f[:, None]*Vm[:, 1:]])
        W = np.sqrt(w)/(f*Qp)
        sol, *_ = np.linalg.lstsq(M*W[:, None], f*W, rcond=None)
        p = sol[:n+1]; q = np.concatenate([[1.0], sol[n+1:]])
        Q = Vm@q; err = (Vn@p)/Q/f - 1; e = np.max(np.abs(err))
        if best is None or e < best[0]: best = (e, p.copy(), q.copy())
        Qp = Q; w = w*np.abs(err); w /= w.sum()
    e, p, q = best
    return e, p/A**np.arange(n+1), q/A**np.arange(m+1), a, f

def expfit(deg, rmax, iters=200):
    r = np.linspace(-rmax, rmax, 4001); f = np.exp(r/2)
    V = np.vander(r, deg+1, increasing=True)[:, 1:]   # rho, rho^2, ...
    w = np.ones_like(r)/len(r); best = None
    for it in range(iters):
        W = np.sqrt(w)/f
        c, *_ = np.linalg.lstsq(V*W[:, None], (f-1)*W, rcond=None)
        err = (1 + V@c)/f - 1; e = np.max(np.abs(err))
        if best is None or e < best[0]: best = (e, c.copy())
        w = w*np.abs(err); w /= w.sum()
    return best

if __name__ == "__main__":
    A = 14.5
    e, p, q, a, f = ratfit(4, 5, A)
    pf = [f32(-v) for v in p]; qf = [f32(v) for v in q]   # P negated: g <= 0
    # error with float coefficients (evaluated in double)
    P = np.polyval(pf[::-1], a); Q = np.polyval(qf[::-1], a)
    ef = np.max(np.abs(-P/Q/f - 1))
    print(f"// rational [4/5] on [0, {A}]: max rel err {e:.3e} (double coeffs), {ef:.3e} (float coeffs)")
    print("P (negated, a^0..a^4):", ", ".join("%.9ef" % v for v in pf))
    print("Q (a^0..a^5):", ", ".join("%.9ef" % v for v in qf))
    print("// float-aware refinement (fit_float.py): these are the coefficients the kernel uses")
    import fit_float
    fit_float.refine()
    for B, deg in [(5, 2), (4, 3), (5, 3), (3, 3)]:
        rmax = LN2/2**B*1.002
        e, c = expfit(deg, rmax)
        cf = [f32(v) for v in c]
        r = np.linspace(-rmax, rmax, 4001)
        ef = np.max(np.abs((1 + sum(cf[i]*r**(i+1) for i in range(deg)))/np.exp(r/2) - 1))
        print(f"// exp: 2^(j/{2**B}) table, degree {deg}: max rel err {e:.3e} ({ef:.3e} float)")
        print("c:", ", ".join("%.9ef" % v for v in cf))
        tab = [f32(2**(j/2**B)) for j in range(2**B)]
        print("table:", ", ".join("%.9ef" % v for v in tab))
    print("2L = %.9ef, C = %.9ef" % (f32(2*LN2), f32(1/(2*LN2))))
    # AVX2: bits(2^(j/8) 2^64) - (j << 20), to which bits(sh) << 20 = (n << 23) + (j << 20) is added
    bits = [(struct.unpack('I', struct.pack('f', f32(2**(j/8))))[0] + (64 << 23) - (j << 20)) & 0xffffffff
            for j in range(8)]
    print("AVX2 biased table:", ", ".join("0x%08x" % b for b in bits))
