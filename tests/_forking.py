"""run_in_fork: a function run in a forked child, for the fork-safety tests (imported
by test files and by the fresh interpreters some of them start; no pytest needed)."""
import os
import select


def run_in_fork(fn, timeout=60.0) -> bytes:
    """fn() in a child of os.fork(); returns the bytes it returned (b"" if it raised).
    A child that has not answered after `timeout` seconds is killed and an
    AssertionError says it deadlocked."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: whatever happens, leave without running the parent's cleanup
        try:
            os.close(r)
            os.write(w, fn())
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], timeout)
        if not ready:
            os.kill(pid, 9)
            raise AssertionError("the forked child deadlocked")
        chunks = []
        while True:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
