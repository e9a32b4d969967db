//! Arbitrary bytes as a directory-stream frame (the bytes after the length prefix), as a
//! request and as a response: typed errors, never a panic; a frame that decodes encodes back
//! to the same bytes; the length prefix check agrees with the decoders' limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_overlay::directory::request::{
    DirRequest, DirResponse, MAX_REQUEST_LEN, MAX_RESPONSE_LEN, frame_len,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = DirRequest::decode(data) {
        let frame = request.encode();
        assert_eq!(&frame[4..], data);
        let prefix = [frame[0], frame[1], frame[2], frame[3]];
        assert_eq!(frame_len(prefix, MAX_REQUEST_LEN), Ok(data.len()));
    }
    if let Ok(response) = DirResponse::decode(data) {
        let frame = response.encode();
        assert_eq!(&frame[4..], data);
        let prefix = [frame[0], frame[1], frame[2], frame[3]];
        assert_eq!(frame_len(prefix, MAX_RESPONSE_LEN), Ok(data.len()));
    }
    if let Some(prefix) = data.first_chunk::<4>() {
        let _ = frame_len(*prefix, MAX_REQUEST_LEN);
    }
});
