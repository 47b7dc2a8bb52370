#!/usr/bin/python3
"""Use fhcudaupload's device memory from Python with CuPy (or DLPack), without a copy.

fhcudaupload's output buffers hold CUDA device memory: a GstCudaMemory where GStreamer's
CUDA library (libgstcuda-1.0) is present, our own FirehoseCudaMemory (which cannot be
mapped on the host) elsewhere. Either way it lies in the device's primary context, the
one CuPy and PyTorch use. Each carries a GstCustomMeta named "FirehoseCudaMeta" whose structure has
    device-ptr (uint64)  the device address of the data
    size       (uint64)  its bytes
    stream     (uint64)  the CUstream the copy ran on (already complete when pushed)
    device     (int)     the CUDA device index
and, under layout=payloads, packets, payload-bytes and table-offset (uint). CuPy wraps
the pointer with cupy.cuda.UnownedMemory; the Gst.Buffer must stay referenced for as
long as the array is used, since dropping it gives the block back to fhcudaupload.
The array speaks DLPack, so other libraries take the same memory without a copy:
torch.from_dlpack(array) (--dlpack does it, if PyTorch is installed).

This needs a machine with an NVIDIA GPU, its driver and CuPy (pip install cupy-cuda12x);
it has NOT been run on a GPU yet (none was available when it was written). Run with the
plugin on GST_PLUGIN_PATH (cargo build --release -p gstfirehose):

    GST_PLUGIN_PATH=target/release /usr/bin/python3 examples/cuda_upload.py

(the system Python, which has PyGObject: apt install python3-gi gir1.2-gstreamer-1.0).
It sums each buffer's bytes on the GPU and compares with the sum of the same bytes on
the host (taken before the upload), and exits non-zero on a mismatch.

--no-cupy prints the meta only: with the stand-in driver of the tests (a fixture whose
"device" memory is host memory) the pointers are not GPU pointers, and CuPy must not
touch them. Give another pipeline as an argument; it must contain `identity name=tap`
before `fhcudaupload` and end in `appsink name=sink`.
"""

import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

from custom_meta import reads_meta  # noqa: E402

DEFAULT = (
    "fhtestsrc num-packets=4096 packet-size=8000 "
    "! identity name=tap signal-handoffs=true "
    "! fhcudaupload "
    "! appsink name=sink sync=false emit-signals=false"
)


@reads_meta("FirehoseCudaMeta")
def device_view(s):
    """The device meta of a buffer as a dict, or None."""
    view = {
        "ptr": s.get_uint64("device-ptr")[1],
        "size": s.get_uint64("size")[1],
        "stream": s.get_uint64("stream")[1],
        "device": s.get_int("device")[1],
    }
    ok, packets = s.get_uint("packets")
    if ok:
        view["packets"] = packets
        view["table-offset"] = s.get_uint("table-offset")[1]
    return view


def as_cupy(buf, view):
    """A CuPy uint8 array over the buffer's device memory (no copy); `buf` stays alive
    through the memory's owner."""
    import cupy

    mem = cupy.cuda.UnownedMemory(view["ptr"], view["size"], owner=buf, device_id=view["device"])
    return cupy.ndarray((view["size"],), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))


def as_torch(array):
    """The same device memory as a PyTorch tensor, through DLPack (no copy)."""
    import torch

    return torch.from_dlpack(array)


def main():
    args = [a for a in sys.argv[1:] if a not in ("--no-cupy", "--dlpack")]
    use_cupy = "--no-cupy" not in sys.argv
    use_dlpack = "--dlpack" in sys.argv
    Gst.init(None)
    pipeline = Gst.parse_launch(args[0] if args else DEFAULT)
    host_sums = []

    def on_handoff(_identity, buf):
        ok, info = buf.map(Gst.MapFlags.READ)
        if ok:
            host_sums.append(sum(info.data))
            buf.unmap(info)

    pipeline.get_by_name("tap").connect("handoff", on_handoff)
    sink = pipeline.get_by_name("sink")
    if pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
        msg = pipeline.get_bus().timed_pop_filtered(Gst.SECOND, Gst.MessageType.ERROR)
        print("could not start:", msg.parse_error()[0].message if msg else "?", file=sys.stderr)
        pipeline.set_state(Gst.State.NULL)
        return 1
    n, bad = 0, 0
    while True:
        sample = sink.emit("pull-sample")
        if sample is None:
            break
        buf = sample.get_buffer()
        view = device_view(buf)
        if view is None:
            print("a buffer without the device meta", file=sys.stderr)
            return 1
        line = f"buffer {n}: {view['size']} bytes at device {view['device']} 0x{view['ptr']:x}"
        if use_cupy:
            array = as_cupy(buf, view)
            if use_dlpack:
                tensor = as_torch(array)
                if tensor.data_ptr() != view["ptr"]:
                    print("DLPack gave another pointer", file=sys.stderr)
                    return 1
            gpu_sum = int(array.sum(dtype="uint64"))
            same = n < len(host_sums) and gpu_sum == host_sums[n]
            bad += not same
            line += f", sum on the GPU {gpu_sum} ({'matches' if same else 'DIFFERS from'} the host)"
        print(line)
        n += 1
    pipeline.set_state(Gst.State.NULL)
    if n == 0:
        print("no buffer arrived", file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
