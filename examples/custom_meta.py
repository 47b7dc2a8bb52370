"""What the Python examples share: reading a buffer's GstCustomMeta, and printing a line
for each buffer an `appsink name=sink` takes.

The examples run as `python3 examples/<example>.py`, so this directory is on sys.path
and `import custom_meta` finds this file; copy it beside an example taken elsewhere.
"""

import functools
import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402


def reads_meta(name):
    """Makes `f(structure)` a function of a buffer: `f` of the structure of the buffer's
    GstCustomMeta `name`, or None when the buffer has none."""

    def wrap(f):
        @functools.wraps(f)
        def of_buffer(buf):
            meta = buf.get_custom_meta(name)
            return None if meta is None else f(meta.get_structure())

        return of_buffer

    return wrap


def print_each(default, line_of, missing):
    """Plays the pipeline given as the first argument (`default` without one), which
    ends in `appsink name=sink`, and prints `line_of(buffer)` for each buffer until none
    comes for 10 s. Returns the exit status: 1, saying so, when a buffer has no line
    (`missing` says what it lacks) or no buffer arrived; else 0."""
    Gst.init(None)
    pipeline = Gst.parse_launch(sys.argv[1] if len(sys.argv) > 1 else default)
    sink = pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    seen = 0
    while True:
        sample = sink.emit("try-pull-sample", 10 * Gst.SECOND)
        if sample is None:
            break
        line = line_of(sample.get_buffer())
        if line is None:
            print(f"a buffer without {missing}", file=sys.stderr)
            return 1
        seen += 1
        print(line)
    pipeline.set_state(Gst.State.NULL)
    if seen == 0:
        print("no buffer arrived", file=sys.stderr)
        return 1
    return 0
