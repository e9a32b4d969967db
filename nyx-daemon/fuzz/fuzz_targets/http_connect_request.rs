//! Arbitrary bytes as an HTTP CONNECT client's request head. Typed errors or "need more",
//! never a panic; a parsed head never claims more bytes than it was given nor more than
//! the limit, parses the same on its own, no strict prefix of it parses, and its target is
//! one `ExitTarget` accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_daemon::http_connect::proto::{self, MAX_HEAD_LEN};
use nyx_overlay::directory::ExitTarget;

fuzz_target!(|data: &[u8]| {
    let Ok(Some((request, used))) = proto::parse_request(data) else {
        return;
    };
    assert!(used <= data.len() && used <= MAX_HEAD_LEN);
    let head = &data[..used];
    assert_eq!(proto::parse_request(head), Ok(Some((request.clone(), used))));
    if let Some(shorter) = used.checked_sub(1) {
        assert_eq!(proto::parse_request(&head[..shorter]), Ok(None), "a strict prefix parsed");
    }
    let text = request.target.to_string();
    assert!(text.parse::<ExitTarget>().is_ok(), "{text:?} is not an exit target");
    let _ = nyx_daemon::socks::isolation_group(request.credentials.as_ref());
});
