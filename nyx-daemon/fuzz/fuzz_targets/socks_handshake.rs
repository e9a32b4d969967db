//! Arbitrary bytes as a SOCKS5 client's side of the handshake: each of the greeting,
//! username/password and request parsers on the whole input, then the three in sequence
//! the way the server reads them (each on what the previous one left). Typed errors or
//! "need more", never a panic; a parsed message never claims more bytes than it was given,
//! parses the same on its own, and a request's target is one `ExitTarget` accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_overlay::directory::ExitTarget;
use nyx_daemon::socks::proto::{self, Parsed};

/// Parse `bytes`; check what a result promises; return the value and the rest.
fn check<T: PartialEq + Clone + std::fmt::Debug>(
    bytes: &[u8],
    parse: fn(&[u8]) -> Parsed<T>,
) -> Option<(T, &[u8])> {
    let (value, used) = parse(bytes).ok()??;
    assert!(used <= bytes.len());
    let (msg, rest) = bytes.split_at(used);
    assert_eq!(parse(msg), Ok(Some((value.clone(), used))));
    if let Some(shorter) = used.checked_sub(1) {
        assert_eq!(parse(&msg[..shorter]), Ok(None), "a strict prefix parsed");
    }
    Some((value, rest))
}

fn request(bytes: &[u8]) {
    if let Some((req, _)) = check(bytes, proto::parse_request) {
        let text = req.target.to_string();
        assert!(
            text.parse::<ExitTarget>().is_ok(),
            "{text:?} is not an exit target"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = check(data, proto::parse_greeting);
    let _ = check(data, proto::parse_auth);
    request(data);
    // In sequence, as the server does.
    let Some((greeting, rest)) = check(data, proto::parse_greeting) else {
        return;
    };
    let rest = match proto::choose_method(&greeting) {
        None => return,
        Some(proto::Method::NoAuth) => rest,
        Some(proto::Method::UserPassword) => {
            let Some((creds, rest)) = check(rest, proto::parse_auth) else {
                return;
            };
            let _ = nyx_daemon::socks::isolation_group(Some(&creds));
            rest
        }
    };
    request(rest);
});
