"""torch.profiler traces handed to the engine as they are written.

profiler_handler(mb) is an on_trace_ready callable: it writes each trace with
prof.export_chrome_trace() into a folder and sends a Log record whose text is

    meshbench-import: <absolute path of the trace>

which the engine takes as "import this Kineto trace into the live session" (as `meshbench-engine
import` reads one). The path is on the rank's host: the engine can read it when it runs on that host
or the folder is on a shared file system (set MESHBENCH_TRACE_DIR, or pass directory=, to put the
traces there). The file's name carries the rank, so the import's rank-from rule finds it.
"""

from __future__ import annotations

import os
import tempfile

IMPORT_PREFIX = "meshbench-import: "
TRACE_DIR_VARIABLE = "MESHBENCH_TRACE_DIR"


def profiler_handler(mb, directory: str | None = None):
    """An on_trace_ready callable for torch.profiler.profile that exports each trace and tells the
    engine where it is."""
    folder = directory or os.environ.get(TRACE_DIR_VARIABLE) or None
    written = 0

    def on_trace_ready(prof) -> str:
        nonlocal folder, written
        if folder is None:
            folder = tempfile.mkdtemp(prefix="meshbench-traces-")
        os.makedirs(folder, exist_ok=True)
        written += 1
        name = f"rank{mb.rank}.step{mb.step_number}.{written}.pt.trace.json"
        path = os.path.abspath(os.path.join(folder, name))
        prof.export_chrome_trace(path)
        mb.log(IMPORT_PREFIX + path, "info")
        return path

    return on_trace_ready
