//! pcap and pcapng reading on arbitrary files, and each record's frame decoded to its
//! UDP datagram: nothing may panic, every record lies inside what was read, and the
//! reader stops (end, or an error) within a bounded number of records.

#![no_main]

use std::io::Cursor;

use firehose_core::frame;
use firehose_record::read::container::CaptureReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = CaptureReader::new(Cursor::new(data)) else {
        return;
    };
    // A record takes at least 16 bytes of file (a pcap record header): more records
    // than that would mean the reader loops on the same bytes.
    let most = data.len() / 16 + 1;
    let mut n = 0;
    while let Ok(Some(rec)) = r.next_record() {
        n += 1;
        assert!(n <= most, "{n} records from {} bytes", data.len());
        assert!(rec.data.len() <= data.len());
        if let Ok(d) = frame::datagram(rec.linktype, rec.data) {
            assert!(d.payload.len() <= rec.data.len());
        }
    }
});
