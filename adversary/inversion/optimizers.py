"""Optimizers over a batch of INDEPENDENT problems: variables V of shape (P, D), one row per problem.

``evaluate(V) -> (f, G)`` returns every problem's objective (P,) and gradient (P, D). Nothing couples the
rows: each problem has its own step sizes, L-BFGS history and line search, so a batch of P problems
follows the same trajectories as P separate runs (up to floating-point reassociation in batched kernels).
That is what lets restarts and targets run as one vmapped problem (``torch.optim.LBFGS`` on the
concatenation would share one history and one line search across problems).

* ``lbfgs``: limited-memory BFGS (Nocedal & Wright 2006, section 7.2; compact representation of Byrd,
  Nocedal & Schnabel 1994) with a backtracking Armijo line search per problem, as DLG uses L-BFGS (Zhu et al. 2019).
* ``adam`` / ``sgd``: elementwise first-order steps, optionally on the sign of the gradient and with
  Inverting Gradients' step decay (Geiping et al. 2020: Adam on signed gradients, lr x0.1 at 3/8, 5/8, 7/8
  of the iterations), followed by a projection (the box constraint).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from adversary.inversion import clock

Evaluate = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
Project = Callable[[torch.Tensor], torch.Tensor]
# Called after every iteration with (iteration starting at 1, V, f(V)).
Monitor = Callable[[int, torch.Tensor, torch.Tensor], None]


@dataclass
class Budget:
    """An optional time limit for one optimisation; the optimizer records how far it got.

    Past ``deadline`` (a ``clock.deadline_after`` value) the optimizer stops before its next step and returns
    the best iterate so far of every problem; ``cut`` says that it did, ``iterations`` how many steps it took
    (0: the limit ran out before the first step, and the best so far is the starting point).
    """

    deadline: float | None = None
    iterations: int = 0
    cut: bool = False

    def exhausted(self) -> bool:
        return clock.passed(self.deadline)


@dataclass(frozen=True)
class LbfgsSettings:
    lr: float = 1.0  # trial step of the line search (torch.optim.LBFGS's lr)
    history: int = 600  # most pairs (s, y) kept per problem (capped by memory, see ``history_length``)
    armijo: float = 1e-4  # sufficient-decrease constant c1
    shrink: float = 0.5  # backtracking factor
    max_trials: int = 12  # function evaluations per line search
    curvature_eps: float = 1e-10  # pairs with y.s below this are skipped (as torch.optim.LBFGS does)
    # A problem is finished when its gradient has shrunk by this factor times the precision's epsilon
    # (float32: 1.2e-7, float64: 2.2e-16) or its step no longer changes V at that precision. Stopping
    # there also keeps float32 away from denormal numbers, which make each CPU evaluation ~10x slower.
    tolerance: float = 1.0


def lbfgs(
    evaluate: Evaluate,
    v0: torch.Tensor,
    iterations: int,
    settings: LbfgsSettings,
    monitor: Monitor | None = None,
    budget: Budget | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Minimise every row of ``v0`` independently; returns (V, f(V)). f never increases per problem, so the
    iterate where a ``budget`` cuts the run short is each problem's best so far."""
    budget = budget if budget is not None else Budget()
    v = v0.clone()
    f, g = _finite(*evaluate(v))
    problems = v.shape[0]
    memory = _History(problems, v.shape[1], history_length(settings.history, v), v.dtype, v.device)
    fresh = torch.ones(problems, dtype=torch.bool, device=v.device)  # no usable history: scale the first step
    eps = settings.tolerance * torch.finfo(v.dtype).eps
    grad_floor = eps * g.abs().amax(dim=1)
    done = torch.zeros(problems, dtype=torch.bool, device=v.device)
    budget.iterations = 0
    for iteration in range(1, iterations + 1):
        done |= g.abs().amax(dim=1) <= grad_floor
        if bool(done.all()):
            # Every problem has finished: the remaining iterations would not move anything.
            budget.iterations = iterations
            if monitor is not None:
                for later in range(iteration, iterations + 1):
                    if budget.exhausted():  # a long padding (millions of iterations) obeys the time limit too
                        budget.iterations, budget.cut = later - 1, True
                        break
                    monitor(later, v, f)
            break
        if budget.exhausted():
            budget.cut = True
            break
        d = -memory.inverse_hessian_times(g)
        slope = (g * d).sum(dim=1)
        # A problem whose direction does not descend (numerical trouble) restarts from steepest descent.
        bad = ~(slope < 0) & ~done
        if bad.any():
            memory.forget(bad)
            fresh |= bad
            d = torch.where(bad[:, None], -g, d)
            slope = torch.where(bad, -(g * g).sum(dim=1), slope)
        # torch.optim.LBFGS's first step: lr * min(1, 1 / |g|_1), so that a large gradient cannot throw it far.
        first = settings.lr * torch.clamp(1.0 / g.abs().sum(dim=1), max=1.0)
        t = torch.where(fresh, first, torch.full_like(f, settings.lr))
        f_new, g_new, t_new, accepted = _backtrack(evaluate, v, f, g, d, slope, t, done, settings)
        # A failed line search from a fresh start (steepest descent, no history) would be tried again from the
        # same point in the same direction at the same step, and fail again, at every later iteration: the
        # problem cannot move any more, so it is finished (which lets the saturation step's longer passes end
        # where the attack has converged instead of spinning to their last iteration).
        done |= fresh & ~accepted
        # A failed line search leaves the problem where it is and drops its history.
        fresh = ~accepted
        if fresh.any():
            memory.forget(fresh)
        step = t_new[:, None] * d
        done |= accepted & (step.abs().amax(dim=1) <= eps * v.abs().amax(dim=1))
        memory.push(step, g_new - g, settings.curvature_eps)
        v = v + step
        f, g = f_new, g_new
        budget.iterations = iteration
        if monitor is not None:
            monitor(iteration, v, f)
    return v, f


#: Memory per problem for the (s, y) pairs. The history length depends on the problem's size only (never on how
#: many problems are batched, so that batching does not change results): 600 pairs up to ~14k float32 unknowns.
HISTORY_BYTES_PER_PROBLEM = 64 * 2**20


def history_length(most: int, v: torch.Tensor) -> int:
    """Pairs to keep: ``most``, fewer when 2 x pairs x D values would exceed ``HISTORY_BYTES_PER_PROBLEM``."""
    per_pair = 2 * v.shape[1] * v.element_size()
    return max(5, min(most, HISTORY_BYTES_PER_PROBLEM // per_pair))


def _backtrack(
    evaluate: Evaluate,
    v: torch.Tensor,
    f: torch.Tensor,
    g: torch.Tensor,
    d: torch.Tensor,
    slope: torch.Tensor,
    t: torch.Tensor,
    done: torch.Tensor,
    settings: LbfgsSettings,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Armijo backtracking for every problem at once: each keeps the first of its trial steps that decreases enough.

    Returns (f, g, step length, accepted). Problems already accepted (or finished) ride along in the batched
    evaluations without changing, so a problem's result does not depend on its batch mates.
    """
    accepted = done.clone()
    f_new, g_new = f.clone(), g.clone()
    t_new = torch.zeros_like(t)
    t = torch.where(done, torch.zeros_like(t), t)
    for _ in range(settings.max_trials):
        if bool(accepted.all()):
            break
        trial_f, trial_g = evaluate(v + t[:, None] * d)
        ok = ~accepted & torch.isfinite(trial_f) & (trial_f <= f + settings.armijo * t * slope)
        f_new = torch.where(ok, trial_f, f_new)
        g_new = torch.where(ok[:, None], trial_g, g_new)
        t_new = torch.where(ok, t, t_new)
        accepted |= ok
        t = torch.where(accepted, t, t * settings.shrink)
    return f_new, g_new, t_new, accepted | done


class _History:
    """Per-problem L-BFGS memory in the compact representation (Byrd, Nocedal & Schnabel 1994, eq. 3.13).

    H g = gamma g + S p1 + gamma Y p2 with u = R^-1 S^T g, p2 = -u, p1 = R^-T ((D + gamma Y^T Y) u - gamma Y^T g),
    R = triu(S^T Y) in chronological order, D = diag(S^T Y): a handful of batched matrix products per iteration
    whatever the history length, instead of the two-loop recursion's 2m sequential steps. The slots are a ring
    shared by all problems; a pair a problem rejects (y.s too small) or forgets (reset) is stored as zeros
    with a unit diagonal in R, which removes it exactly from that problem's H.
    """

    def __init__(self, problems: int, dims: int, size: int, dtype: torch.dtype, device: torch.device) -> None:
        self.size = size
        self.s = torch.zeros(problems, size, dims, dtype=dtype, device=device)
        self.y = torch.zeros(problems, size, dims, dtype=dtype, device=device)
        self.sy = torch.zeros(problems, size, size, dtype=dtype, device=device)  # s_i . y_j
        self.yy = torch.zeros(problems, size, size, dtype=dtype, device=device)  # y_i . y_j
        self.valid = torch.zeros(problems, size, dtype=torch.bool, device=device)
        self.gamma = torch.ones(problems, dtype=dtype, device=device)  # H0 = gamma I (Nocedal & Wright eq. 7.20)
        self.pushed = 0

    def push(self, s: torch.Tensor, y: torch.Tensor, eps: float) -> None:
        ys = (y * s).sum(dim=1)
        keep = ys > eps
        s = torch.where(keep[:, None], s, torch.zeros_like(s))
        y = torch.where(keep[:, None], y, torch.zeros_like(y))
        k = self.pushed % self.size
        self.s[:, k] = s
        self.y[:, k] = y
        self.valid[:, k] = keep
        self.sy[:, k, :] = _row_times(s, self.y)
        self.sy[:, :, k] = _row_times(y, self.s)
        yy = _row_times(y, self.y)
        self.yy[:, k, :] = yy
        self.yy[:, :, k] = yy
        self.gamma = torch.where(keep, ys / torch.where(keep, (y * y).sum(dim=1), torch.ones_like(ys)), self.gamma)
        self.pushed += 1

    def forget(self, which: torch.Tensor) -> None:
        for tensor in (self.s, self.y, self.sy, self.yy):
            tensor[which] = 0
        self.valid[which] = False
        self.gamma[which] = 1

    def inverse_hessian_times(self, g: torch.Tensor) -> torch.Tensor:
        count = min(self.pushed, self.size)
        if count == 0:
            return self.gamma[:, None] * g
        # The filled slots are 0..count-1; chronologically they are a rotation of that range by `oldest`.
        # Only the small (count x count) matrices are put in chronological order, the (count x D) memories
        # are used in slot order with the coefficients rotated back.
        oldest = self.pushed % self.size if self.pushed >= self.size else 0
        s, y = self.s[:, :count], self.y[:, :count]
        sy = _chronological(self.sy[:, :count, :count], oldest)
        yy = _chronological(self.yy[:, :count, :count], oldest)
        valid = torch.roll(self.valid[:, :count], -oldest, dims=1)
        # Rejected slots are all-zero: a unit diagonal keeps R invertible and leaves the valid part untouched.
        r = torch.triu(sy) + torch.diag_embed((~valid).to(g.dtype))
        diag = torch.diagonal(sy, dim1=1, dim2=2)
        gamma = self.gamma[:, None]
        a = torch.roll(_row_times(g, s), -oldest, dims=1)
        b = torch.roll(_row_times(g, y), -oldest, dims=1)
        u = torch.linalg.solve_triangular(r, a[..., None], upper=True)[..., 0]
        w = diag * u + gamma * torch.bmm(yy, u[..., None])[..., 0] - gamma * b
        p1 = torch.linalg.solve_triangular(r.transpose(1, 2), w[..., None], upper=False)[..., 0]
        coefficient_s = torch.roll(p1, oldest, dims=1)
        coefficient_y = torch.roll(gamma * u, oldest, dims=1)
        return gamma * g + _combine(coefficient_s, s) - _combine(coefficient_y, y)


def _chronological(matrix: torch.Tensor, oldest: int) -> torch.Tensor:
    return torch.roll(matrix, shifts=(-oldest, -oldest), dims=(1, 2)) if oldest else matrix


# Row-vector forms of the (P, m, D) products: on the CPU, MKL's batched (1 x D)(D x m) is about ten times
# faster than the equivalent (m x D)(D x 1) that einsum picks for some index orders.
def _row_times(v: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    """(P, D) x (P, m, D) -> (P, m): v . memory_i per problem."""
    return torch.bmm(v[:, None, :], memory.transpose(1, 2))[:, 0]


def _combine(coefficients: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    """(P, m) x (P, m, D) -> (P, D): sum_i c_i memory_i per problem."""
    return torch.bmm(coefficients[:, None, :], memory)[:, 0]


def _finite(f: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A problem that starts non-finite cannot descend: its objective becomes +inf, its gradient 0."""
    bad = ~torch.isfinite(f) | ~torch.isfinite(g).all(dim=1)
    return torch.where(bad, torch.full_like(f, float("inf")), f), torch.where(bad[:, None], torch.zeros_like(g), g)


@dataclass(frozen=True)
class FirstOrderSettings:
    method: str  # "adam" | "sgd"
    lr: float
    signed: bool  # step on sign(gradient) (Inverting Gradients)
    decay_milestones: tuple[int, ...] = ()  # iterations after which lr is multiplied by 0.1
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8


def ig_milestones(iterations: int) -> tuple[int, ...]:
    """Inverting Gradients' MultiStepLR milestones: iterations // 2.667, // 1.6, // 1.142 (3/8, 5/8, 7/8)."""
    return tuple(int(iterations // factor) for factor in (2.667, 1.6, 1.142))


def first_order(
    evaluate: Evaluate,
    v0: torch.Tensor,
    iterations: int,
    settings: FirstOrderSettings,
    project: Project | None = None,
    monitor: Monitor | None = None,
    budget: Budget | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Adam (Kingma & Ba 2015, torch.optim.Adam's update) or SGD, elementwise; returns (V, f(V)).

    The monitor sees, for every k, the iterate after k steps and its objective (evaluated anyway at the
    start of step k + 1; one extra evaluation at the end gives the final objective). These steps do not
    decrease f monotonically (signed steps oscillate around a minimum at the step size), so each problem's
    lowest-objective iterate is returned, whether the iterations ran out or a ``budget``'s deadline cut them,
    as breaching does: the last iterate can be worse than one seen before it.
    """
    budget = budget if budget is not None else Budget()
    best: tuple[torch.Tensor, torch.Tensor] | None = None  # (V, f) of each problem's lowest-objective iterate
    budget.iterations = 0
    v = project(v0) if project is not None else v0.clone()
    m1 = torch.zeros_like(v)
    m2 = torch.zeros_like(v)
    beta1, beta2 = settings.betas
    lr = settings.lr
    for iteration in range(1, iterations + 1):
        if iteration - 1 in settings.decay_milestones:
            lr *= 0.1
        f, g = evaluate(v)
        if monitor is not None and iteration > 1:
            monitor(iteration - 1, v, f)  # v has taken iteration - 1 steps; f is its objective
        # the objective of v is known here anyway: keeping the best iterate costs one comparison per step
        best = _better(best, v, f)
        if budget.exhausted():
            budget.cut = True
            return best
        g = torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
        if settings.signed:
            g = torch.sign(g)
        if settings.method == "adam":
            m1 = beta1 * m1 + (1 - beta1) * g
            m2 = beta2 * m2 + (1 - beta2) * g * g
            correction1 = 1 - beta1**iteration
            correction2 = 1 - beta2**iteration
            v = v - (lr / correction1) * m1 / (m2.sqrt() / correction2**0.5 + settings.eps)
        elif settings.method == "sgd":
            v = v - lr * g
        else:
            raise ValueError(f"unknown first-order method '{settings.method}'; allowed: adam, sgd")
        if project is not None:
            v = project(v)
        budget.iterations = iteration
    f, _ = evaluate(v)
    if monitor is not None and iterations > 0:
        monitor(iterations, v, f)
    return _better(best, v, f)


def _better(
    best: tuple[torch.Tensor, torch.Tensor] | None, v: torch.Tensor, f: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per problem, the iterate with the lower finite objective (the earlier one on ties)."""
    f = torch.where(torch.isfinite(f), f, torch.full_like(f, float("inf")))
    if best is None:
        return v.clone(), f
    improved = f < best[1]
    return torch.where(improved[:, None], v, best[0]), torch.where(improved, f, best[1])
