//! Directory-stream frames: each type's layout, every refusal with its reason, the limits,
//! and the codec as properties (round trips; arbitrary bytes never panic and decode only to
//! what encodes back to them).

use proptest::prelude::*;

use super::*;

/// The frame without its length prefix, after checking the prefix.
fn body(frame: &[u8], max: usize) -> &[u8] {
    let prefix: [u8; 4] = frame[..4].try_into().unwrap();
    assert_eq!(frame_len(prefix, max).unwrap(), frame.len() - 4);
    &frame[4..]
}

#[test]
fn frames_have_the_documented_layout() {
    let get = DirRequest::GetConsensus { newer_than: 0x0102 }.encode();
    assert_eq!(get, [0, 0, 0, 9, 0x01, 0, 0, 0, 0, 0, 0, 1, 2]);
    let sig = DirRequest::PostSignature {
        valid_after: 7,
        body_digest: [0xdd; 32],
        signer: NodeId::from_bytes([0x55; 32]),
        signature: [0x99; SIGNATURE_LEN],
    }
    .encode();
    assert_eq!(sig.len(), 4 + 1 + 8 + 32 + 32 + 64);
    assert_eq!(
        (sig[4], sig[12], sig[13], sig[45], sig[77]),
        (5, 7, 0xdd, 0x55, 0x99)
    );
    assert_eq!(DirResponse::NotFound.encode(), [0, 0, 0, 1, 0x85]);
    let c = DirResponse::Consensus {
        consensus: vec![1, 2],
        descriptors: vec![vec![3], vec![]],
    }
    .encode();
    assert_eq!(
        c,
        [
            0, 0, 0, 20, 0x82, 0, 0, 0, 2, 1, 2, 0, 0, 0, 2, 0, 0, 0, 1, 3, 0, 0, 0, 0
        ]
    );
    let refused = DirResponse::refused("no").encode();
    assert_eq!(refused, [0, 0, 0, 3, 0x86, b'n', b'o']);
}

#[test]
fn frame_lengths_outside_the_limit_are_refused_before_reading() {
    assert_eq!(frame_len([0, 0, 0, 1], 1), Ok(1));
    assert_eq!(
        frame_len([0, 0, 0, 0], 10),
        Err(RequestError::FrameLength { len: 0, max: 10 })
    );
    assert_eq!(
        frame_len([0xff; 4], MAX_RESPONSE_LEN),
        Err(RequestError::FrameLength {
            len: u32::MAX as usize,
            max: MAX_RESPONSE_LEN
        })
    );
    assert!(frame_len((MAX_REQUEST_LEN as u32 + 1).to_be_bytes(), MAX_REQUEST_LEN).is_err());
    // decode checks the limit too, for callers that read the frame another way.
    let big = vec![POST_VOTE; MAX_REQUEST_LEN + 1];
    assert!(matches!(
        DirRequest::decode(&big),
        Err(RequestError::FrameLength { .. })
    ));
    assert!(matches!(
        DirRequest::decode(&[]),
        Err(RequestError::FrameLength { len: 0, .. })
    ));
}

#[test]
fn the_limits_hold_the_largest_messages() {
    // A vote of MAX_RELAYS relays fits a request; MAX_DESCRIPTOR_LEN is the largest
    // descriptor layout (docs/protocol.md, "Relay descriptors"): 10 978 bytes (the largest
    // descriptor is built and measured in tests/directory.rs).
    // (MAX_REQUEST_LEN > MAX_VOTE_LEN and MAX_RESPONSE_LEN > MAX_CONSENSUS_LEN are
    // checked at compile time.)
    assert_eq!(MAX_DESCRIPTOR_LEN, 10_978);
    let post = DirRequest::PostDescriptor {
        descriptor: vec![0; MAX_DESCRIPTOR_LEN + 1],
    }
    .encode();
    assert_eq!(
        DirRequest::decode(&post[4..]),
        Err(RequestError::TooLong {
            field: "descriptor",
            len: MAX_DESCRIPTOR_LEN + 1,
            max: MAX_DESCRIPTOR_LEN
        })
    );
}

#[test]
fn bad_frames_are_refused_with_their_reason() {
    assert_eq!(
        DirRequest::decode(&[0x81]),
        Err(RequestError::UnknownType {
            kind: "request",
            type_byte: 0x81
        })
    );
    assert_eq!(
        DirResponse::decode(&[0x01]),
        Err(RequestError::UnknownType {
            kind: "response",
            type_byte: 0x01
        })
    );
    assert_eq!(
        DirRequest::decode(&[GET_VOTE, 1, 2]),
        Err(RequestError::Truncated {
            field: "valid-after",
            needed: 8,
            remaining: 2
        })
    );
    assert_eq!(
        DirResponse::decode(&[OK, 0]),
        Err(RequestError::TrailingBytes { count: 1 })
    );
    assert_eq!(
        DirResponse::decode(&[REFUSED, 0xff, 0xfe]),
        Err(RequestError::NotUtf8)
    );
    let long = [vec![REFUSED], vec![b'x'; MAX_REASON_LEN + 1]].concat();
    assert!(matches!(
        DirResponse::decode(&long),
        Err(RequestError::TooLong {
            field: "reason",
            ..
        })
    ));
    // A descriptor count the remaining bytes cannot hold is refused before allocating.
    let mut huge = vec![CONSENSUS, 0, 0, 0, 0];
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        DirResponse::decode(&huge),
        Err(RequestError::BadCount { count, remaining: 0, .. }) if count == u32::MAX as usize
    ));
    let mut big_consensus = vec![CONSENSUS];
    big_consensus.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        DirResponse::decode(&big_consensus),
        Err(RequestError::TooLong {
            field: "consensus",
            ..
        })
    ));
    // Every cut of a valid frame is refused.
    let frame = DirResponse::Consensus {
        consensus: vec![9; 5],
        descriptors: vec![vec![1; 3], vec![2; 4]],
    }
    .encode();
    for cut in 5..frame.len() {
        assert!(DirResponse::decode(&frame[4..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn refusal_reasons_are_cut_at_a_character_boundary() {
    let long = "é".repeat(MAX_REASON_LEN); // two bytes each
    let DirResponse::Refused { reason } = DirResponse::refused(&long) else {
        panic!("not a refusal");
    };
    assert_eq!(reason.len(), MAX_REASON_LEN);
    // Encoding a hand-built over-long reason cuts it the same way, one byte short of the
    // limit when the limit falls inside a character.
    let odd = format!("a{long}");
    let frame = DirResponse::Refused { reason: odd }.encode();
    let DirResponse::Refused { reason } = DirResponse::decode(&frame[4..]).unwrap() else {
        panic!("not a refusal");
    };
    assert_eq!(reason.len(), MAX_REASON_LEN - 1);
    assert!(reason.starts_with("aé"));
}

fn arb_request() -> impl Strategy<Value = DirRequest> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        any::<u64>().prop_map(|newer_than| DirRequest::GetConsensus { newer_than }),
        bytes().prop_map(|descriptor| DirRequest::PostDescriptor { descriptor }),
        bytes().prop_map(|vote| DirRequest::PostVote { vote }),
        any::<u64>().prop_map(|valid_after| DirRequest::GetVote { valid_after }),
        (
            any::<u64>(),
            any::<[u8; 32]>(),
            any::<[u8; 32]>(),
            any::<[u8; 32]>(),
            any::<[u8; 32]>()
        )
            .prop_map(|(valid_after, body_digest, signer, a, b)| {
                let mut signature = [0u8; SIGNATURE_LEN];
                signature[..32].copy_from_slice(&a);
                signature[32..].copy_from_slice(&b);
                DirRequest::PostSignature {
                    valid_after,
                    body_digest,
                    signer: NodeId::from_bytes(signer),
                    signature,
                }
            }),
    ]
}

fn arb_response() -> impl Strategy<Value = DirResponse> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        Just(DirResponse::Ok),
        Just(DirResponse::NotModified),
        Just(DirResponse::NotFound),
        (bytes(), proptest::collection::vec(bytes(), 0..5)).prop_map(|(consensus, descriptors)| {
            DirResponse::Consensus {
                consensus,
                descriptors,
            }
        }),
        bytes().prop_map(|vote| DirResponse::Vote { vote }),
        "\\PC{0,200}".prop_map(|reason| DirResponse::Refused { reason }),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip(request in arb_request()) {
        let frame = request.encode();
        prop_assert_eq!(DirRequest::decode(body(&frame, MAX_REQUEST_LEN)).unwrap(), request);
    }

    #[test]
    fn responses_round_trip(response in arb_response()) {
        let frame = response.encode();
        let back = DirResponse::decode(body(&frame, MAX_RESPONSE_LEN)).unwrap();
        // Reasons up to 200 characters may exceed MAX_REASON_LEN bytes: they come back cut.
        let expected = match response {
            DirResponse::Refused { reason } => DirResponse::refused(reason),
            other => other,
        };
        prop_assert_eq!(back, expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_decode_canonically(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        if let Ok(request) = DirRequest::decode(&bytes) {
            prop_assert_eq!(&request.encode()[4..], &bytes[..]);
        }
        if let Ok(response) = DirResponse::decode(&bytes) {
            prop_assert_eq!(&response.encode()[4..], &bytes[..]);
        }
    }

    #[test]
    fn typed_frames_with_arbitrary_bodies_never_panic(
        type_byte in prop_oneof![1u8..=5, 0x81u8..=0x86],
        rest in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let frame = [vec![type_byte], rest].concat();
        let _ = DirRequest::decode(&frame);
        if let Ok(response) = DirResponse::decode(&frame) {
            prop_assert_eq!(&response.encode()[4..], &frame[..]);
        }
    }
}
