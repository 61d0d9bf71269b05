"""The op profiler (dispatcher/include/tessera/profiler.h): a Chrome/Perfetto trace and a per-op summary."""
import contextlib

from . import _C


def enable(spec="summary"):
    """Starts recording: spec is a trace path, "summary", or both ("trace.json,summary")."""
    _C._profiler_enable(spec)


def disable():
    _C._profiler_enable("")


def enabled():
    return _C._profiler_enabled()


def summary():
    """The per-op table (op, device, resolution, calls, total, mean, max) of what was recorded."""
    return _C._profiler_summary()


def flush():
    """Writes the trace file now (a no-op without a trace path)."""
    _C._profiler_flush()


def clear():
    _C._profiler_clear()


@contextlib.contextmanager
def profile(spec="summary"):
    """with tessera.profiler.profile("trace.json"): ... records the block, then writes the trace."""
    clear()
    enable(spec)
    try:
        yield
    finally:
        flush()
        disable()
