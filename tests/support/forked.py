"""A process forked for a test, holding something until the test lets it go."""

import contextlib
import multiprocessing


@contextlib.contextmanager
def holding(target, *args):
    """Run ``target(*args, ready)`` in a forked process; the block runs once it sets ``ready``, and
    the process is killed when the block ends (what it held must then be free)."""
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    holder = context.Process(target=target, args=(*args, ready))
    holder.start()
    try:
        assert ready.wait(10)
        yield
    finally:
        holder.kill()
        holder.join(10)
