"""Float-aware refinement of fit.py's rational: coefficients are rounded to float one at a time
(highest degree first, alternating P and Q), the rest refit (minimax relative, Lawson) after each."""
import numpy as np, math
from fit import target, f32
A = 14.5
N = 8000
u = np.linspace(0, 1, N)
a = np.unique(np.concatenate([A*(1-np.cos(np.pi*u))/2, np.linspace(0, A, N)]))[1:]
f = target(a)
n, m = 4, 5
def solve(fixed, iters=200):
    # unknown vector: p0..pn, q1..qm; fixed: dict index->value; p(a) - f q(a) = f (q0 = 1)
    Vn = np.vander(a, n+1, increasing=True); Vm = np.vander(a, m+1, increasing=True)
    M = np.hstack([Vn, -f[:, None]*Vm[:, 1:]]); rhs = f.copy()
    free = [i for i in range(n+1+m) if i not in fixed]
    for i, v in fixed.items(): rhs = rhs - M[:, i]*v
    Mf = M[:, free]
    col = np.max(np.abs(Mf), axis=0)
    w = np.ones_like(a)/len(a); Qp = np.ones_like(a); best = None
    for it in range(iters):
        W = np.sqrt(w)/(f*Qp)
        sol, *_ = np.linalg.lstsq(Mf/col*W[:, None], rhs*W, rcond=None)
        sol /= col
        x = np.zeros(n+1+m)
        for i, v in fixed.items(): x[i] = v
        x[free] = sol
        p = x[:n+1]; q = np.concatenate([[1.0], x[n+1:]])
        Q = Vm@q; err = (Vn@p)/Q/f - 1; e = np.max(np.abs(err))
        if best is None or e < best[0]: best = (e, x.copy())
        Qp = Q; w = w*np.abs(err); w /= w.sum()
    return best
def refine():
    fixed = {0: 0.5}
    e, x = solve(fixed)
    print("start %.3e" % e)
    order = [n+m, n, n+m-1, n-1, n+m-2, n-2, n+m-3, 1, n+1]  # q5 p4 q4 p3 q3 p2 q2 p1 q1
    for i in order:
        fixed[i] = f32(x[i])
        if len(fixed) < n+1+m:
            e, x = solve(fixed)
        else:
            x = np.array([fixed[j] for j in range(n+1+m)])
            p = x[:n+1]; q = np.concatenate([[1.0], x[n+1:]])
            e = np.max(np.abs(np.polyval(p[::-1], a)/np.polyval(q[::-1], a)/f - 1))
        print("fixed %d: %.3e" % (i, e))
    p = [-f32(v) for v in x[:n+1]]; q = [1.0] + [f32(v) for v in x[n+1:]]
    print("P (negated):", ", ".join("%.9ef" % v for v in p))
    print("Q:", ", ".join("%.9ef" % v for v in q))
    return p, q

if __name__ == '__main__':
    refine()
