"""Will it fit? Memory estimates of a configuration, checked before anything is allocated.

:func:`estimate_memory` adds up the weight path ((T/dt + 1) H d^2 doubles, four arrays),
the tokens, the mesh and the gathered outputs, with per-item costs measured on the
development machine; :func:`check_resources` refuses a configuration that needs more than
:func:`available_memory` (psutil, /proc/meminfo or sysconf, lowered to a cgroup limit;
``SPHEREPDE_MAX_MEMORY=32G`` overrides it) with a ConfigError naming the key to change.
"""

from __future__ import annotations

import math
from pathlib import Path

from spherepde.runs.config import Config, ConfigError

__all__ = ["format_bytes", "FALLBACK_MEMORY", "available_memory", "MESH_BYTES_PER_CELL", "TOKEN_BYTES", "CLUSTER_BYTES_PER_PAIR", "ROW_BYTES", "estimate_memory", "check_resources"]


def format_bytes(n: float) -> str:
    """``1.5 GiB``; an overflowing estimate reads ``more than 1e300 bytes``."""
    if not math.isfinite(n) or n > 1e300:
        return "more than 1e300 bytes"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def _parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in "KMGT" and t else t
    value = float(number) * mult
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return int(value)


#: Memory assumed when the machine does not tell (no psutil, no /proc, no sysconf).
FALLBACK_MEMORY = 16 * 2**30


def available_memory() -> tuple[int, str]:
    """(bytes a run may use, where that number comes from).

    ``SPHEREPDE_MAX_MEMORY`` (e.g. ``8G``) wins; otherwise the memory available now
    (psutil, else /proc/meminfo MemAvailable, else the physical memory from sysconf),
    capped by a cgroup (container, batch job) limit; else :data:`FALLBACK_MEMORY`.
    """
    import os

    env = os.environ.get("SPHEREPDE_MAX_MEMORY", "").strip()
    if env:
        try:
            return _parse_size(env), "SPHEREPDE_MAX_MEMORY"
        except (ValueError, IndexError):
            raise ConfigError(f"SPHEREPDE_MAX_MEMORY: {env!r} is not a size; use e.g. 8G, 512M or a number of bytes") from None
    avail, source = None, "available"
    try:
        import psutil

        avail = int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or unusable: ask the kernel
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            pass
    if avail is None:
        try:
            avail, source = int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), "installed"
        except (AttributeError, ValueError, OSError):
            return FALLBACK_MEMORY, "assumed (the machine's memory is unknown)"
    try:  # a cgroup v2 limit (containers, batch jobs) below the machine's memory
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            if int(limit) - used < avail:
                avail, source = max(int(limit) - used, 0), "available (cgroup limit)"
    except (OSError, ValueError):
        pass
    return avail, source


#: Bytes per mesh cell of a mesh run (geometry, state, stages, fluxes; measured ~1 kB at
#: H = 1 and ~1.8 kB at H = 4) -- the constant and the per-head part.
MESH_BYTES_PER_CELL = (1024, 256)


#: Bytes per token and coordinate (tokens, integrator stages, velocities) and per token,
#: head and coordinate (the attention sums Z_h, Y_h, Q_h and their products).
TOKEN_BYTES = (32 * 8, 16 * 8)


#: Worst case of the recorded cluster count (model.energy.cluster_count): scipy lists every
#: pair of tokens closer than the linkage radius, ~28 bytes per n^2 once all tokens gather.
CLUSTER_BYTES_PER_PAIR = 28


#: Bytes per diagnostics row (read back as text, then floats).
ROW_BYTES = 2048


def estimate_memory(cfg: Config) -> list[tuple[float, str, str, str]]:
    """The largest memory needs of a run, as (bytes, key, what, fix): ``key`` is the
    configuration key that sets the size. Computed in floats, so an impossible size is a
    huge number or ``inf``, never an OverflowError.

    The weight path holds A, V, the drift and the increments on every grid point
    ((T/dt + 1) H d^2 doubles each; general heads generate V with its own drift and noise
    too); tokens and mesh cells are counted with the per-item costs above.
    """
    m, w, out, ini = cfg.model, cfg.weights, cfg.output, cfg.initial
    T, H, d = cfg.solver.T, float(m.H), float(m.d)
    grid = T / w.dt + 1
    arrays = 4 if m.heads == "gradient" else 6
    path = grid * H * d * d * 8 * arrays
    terms = []
    blame = max((H / 4, "model.H"), (d * d / 9, "model.d"), (grid / 201, "steps"))[1]  # the factor furthest above its default
    if blame == "steps":
        key = "weights.dt" if math.log(0.01 / w.dt) > math.log(T / 2) else "solver.T"
        steps = f"{grid - 1:.3g}" if grid < 1e300 else "more than 1e300"
        what = f"solver.T = {T:g} with weights.dt = {w.dt:g} gives {steps} weight-grid steps, and the weight path needs {format_bytes(path)}"
        terms.append((path, key, what, "reduce solver.T or increase weights.dt"))
    else:
        what = f"the weight path ({grid:.3g} grid points x H = {m.H} heads x d^2 = {m.d ** 2} x {arrays} arrays of doubles) needs {format_bytes(path)}"
        terms.append((path, blame, what, f"reduce {blame}"))
    solver = cfg.run.solver
    snap_bytes = 0.0
    if solver in ("particles", "both"):
        n = float(ini.n) if ini.kind != "file" else 0.0  # a token file is checked when it is read
        tokens = n * d * TOKEN_BYTES[0]
        why = ""
        if solver == "particles":
            tokens += CLUSTER_BYTES_PER_PAIR * n * n
            why = f" (the recorded cluster count lists close pairs: up to {CLUSTER_BYTES_PER_PAIR} n^2 bytes)"
        terms.append((tokens, "initial.n", f"initial.n = {ini.n} tokens need {format_bytes(tokens)}{why}", "reduce initial.n"))
        sums = n * H * d * TOKEN_BYTES[1]
        key = "model.H" if H > n else "initial.n"
        terms.append((sums, key, f"the attention sums of initial.n = {ini.n} tokens x model.H = {m.H} heads need {format_bytes(sums)}", f"reduce {key}"))
        snap_bytes += n * d * 8
    if solver in ("mesh", "both") and not cfg.mesh.file:
        nc = 20.0 * float(cfg.mesh.level) ** 2
        mesh = nc * (MESH_BYTES_PER_CELL[0] + MESH_BYTES_PER_CELL[1] * H)
        key = "model.H" if MESH_BYTES_PER_CELL[1] * H > MESH_BYTES_PER_CELL[0] * 4 else "mesh.level"
        terms.append((mesh, key, f"mesh.level = {cfg.mesh.level} ({nc:.3g} cells) with model.H = {m.H} heads needs {format_bytes(mesh)}", f"reduce {key}"))
        snap_bytes += nc * 8
        if solver == "both" and getattr(out, "distances", "") == "all":
            w1 = 24.0 * nc * float(ini.n)
            terms.append((w1, "output.distances", f"output.distances = 'all': the exact W1 cost matrix ({nc:.3g} cells x {ini.n} tokens) needs {format_bytes(w1)}",
                          "use output.distances = 'cheap'"))
    n_snap = T / out.snapshot_dt + 2
    snaps = 2 * n_snap * snap_bytes
    terms.append((snaps, "output.snapshot_dt", f"output.snapshot_dt = {out.snapshot_dt:g} gives {n_snap - 1:.3g} snapshots, gathered at the end in {format_bytes(snaps)}",
                   "increase output.snapshot_dt"))
    n_rec = T / out.record_dt + 1
    paths = max(1, cfg.montecarlo.paths)
    rows = n_rec * ROW_BYTES * paths
    key = "montecarlo.paths" if paths > n_rec else "output.record_dt"
    terms.append((rows, key, f"output.record_dt = {out.record_dt:g} gives {n_rec - 1:.3g} diagnostics rows" + (f" x montecarlo.paths = {paths}" if paths > 1 else "")
                  + f", read back in {format_bytes(rows)}", f"{'reduce' if key == 'montecarlo.paths' else 'increase'} {key}"))
    return terms


def check_resources(cfg: Config) -> None:
    """Refuse (ConfigError naming the key) a run whose memory estimate (:func:`estimate_memory`)
    exceeds the memory available (:func:`available_memory`), before anything is allocated."""
    terms = estimate_memory(cfg)
    total = sum(t[0] for t in terms)
    limit, source = available_memory()
    if total <= limit:
        return
    part, key, what, fix = max(terms, key=lambda t: t[0])
    whole = f" (about {format_bytes(total)} for the whole run)" if total > 1.1 * part else ""
    hint = "" if source == "SPHEREPDE_MAX_MEMORY" else "; or set SPHEREPDE_MAX_MEMORY if the estimate is wrong for this machine"
    raise ConfigError(f"{key}: {what}{whole}, but {format_bytes(limit)} of memory is {source}; {fix}{hint}")

