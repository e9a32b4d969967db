//! Arbitrary bytes as a descriptor and arbitrary text as a directory document: typed errors,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_overlay::directory::{Descriptor, Directory};

fuzz_target!(|data: &[u8]| {
    let _ = Descriptor::decode(data, 1_800_000_000);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Directory::parse(text, 1_800_000_000);
        let _ = text.parse::<nyx_overlay::directory::ExitPolicy>();
    }
});
