//! GPU tests: fhcudaupload on a real device. They need the CUDA driver and a GPU, and
//! fail (not skip) without them, so they are a test target of their own, built only
//! with the `gpu-tests` feature:
//!
//! ```text
//! cargo test -p firehose-cuda --features gpu-tests --test gpu -- --test-threads=1
//! ```
//!
//! Each test reads the device memory back with `cuMemcpyDtoH` and compares it with what
//! went in: the round trip proves the bytes are unchanged. The device they ran on is
//! printed (run with `--nocapture` to see it), so a report can name it.

use cudarc::driver::sys;
use firehose_core::stats::field;
use firehose_cuda::devmem;

mod common;

fn init() -> firehose_cuda::driver::DeviceInfo {
    common::register_elements();
    let cuda = firehose_cuda::driver::Cuda::open(0)
        .unwrap_or_else(|e| panic!("the GPU tests need a CUDA device: {e}"));
    let info = cuda.info().clone();
    println!("GPU tests on {info:?}");
    info
}

/// The bytes of device memory `ptr..ptr + len`, copied back to the host.
fn read_back(ptr: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: the primary context of device 0 made current around a synchronous copy
    // into our vector from device memory an output buffer holds.
    unsafe {
        let mut dev = 0;
        assert_eq!(sys::cuDeviceGet(&mut dev, 0), sys::CUresult::CUDA_SUCCESS);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuCtxPushCurrent_v2(ctx), sys::CUresult::CUDA_SUCCESS);
        let r = sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), ptr, len);
        let mut old = std::ptr::null_mut();
        sys::cuCtxPopCurrent_v2(&mut old);
        sys::cuDevicePrimaryCtxRelease_v2(dev);
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    }
    out
}

#[test]
fn a_round_trip_leaves_the_bytes_unchanged() {
    init();
    let common::Run {
        inputs,
        outputs,
        stats,
    } = common::run_tapped(
        "fhtestsrc num-packets=20000 packet-size=8000 ! identity name=tap signal-handoffs=true \
         ! fhcudaupload name=up ! fakesink name=sink sync=false signal-handoffs=true",
        || {},
    );
    assert_eq!(inputs.len(), outputs.len());
    for (want, out) in inputs.iter().zip(&outputs) {
        let v = devmem::buffer_device_memory(out).expect("device memory");
        assert!(read_back(v.ptr, v.size) == *want);
    }
    assert_eq!(field(&stats, "bounce-copies"), 0, "{stats}");
}

#[test]
fn payload_layout_on_the_device() {
    init();
    let common::Run {
        inputs, outputs, ..
    } = common::run_tapped(
        "fhtestsrc num-packets=2000 packet-size=1400 ! identity name=tap signal-handoffs=true \
         ! fhcudaupload name=up layout=payloads ! fakesink name=sink sync=false \
         signal-handoffs=true",
        || {},
    );
    assert_eq!(inputs.len(), outputs.len());
    for out in &outputs {
        let (v, table) = devmem::read_meta(out).expect("the device meta");
        let t = table.expect("a table");
        let dev = read_back(v.ptr, v.size);
        let offsets: Vec<u32> = dev[t.table_offset as usize..]
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(offsets.len(), t.packets as usize + 1);
        assert_eq!(*offsets.last().unwrap(), t.payload_bytes);
        let meta = out.meta::<firehose_core::PacketBatchMeta>().unwrap();
        for (k, p) in meta.packets().iter().enumerate() {
            assert_eq!((p.offset, p.offset + p.len), (offsets[k], offsets[k + 1]));
        }
    }
}
