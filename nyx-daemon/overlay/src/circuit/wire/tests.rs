use super::*;
use proptest::prelude::*;

#[test]
fn control_round_trips() {
    let msgs = [
        Control::Create {
            circ: 7,
            create: Box::new([3u8; CREATE_LEN]),
        },
        Control::Created {
            circ: u32::MAX,
            created: [9u8; CREATED_LEN],
        },
        Control::Destroy {
            circ: 1,
            reason: DestroyReason::LinkLost,
        },
        Control::Destroy {
            circ: 1,
            reason: DestroyReason::Other(200),
        },
        Control::Destroy {
            circ: 1,
            reason: DestroyReason::Tampered,
        },
        Control::CreateFast {
            circ: 2,
            create: [4u8; FAST_CREATE_LEN],
        },
        Control::CreatedFast {
            circ: 3,
            created: [5u8; FAST_CREATED_LEN],
        },
        Control::Ping,
        Control::Pong,
    ];
    for m in msgs {
        assert_eq!(Control::decode(&m.encode()).unwrap(), m);
    }
    // The code on the wire (docs/protocol.md, "Control messages").
    assert_eq!(DestroyReason::Tampered.code(), 9);
    assert_eq!(DestroyReason::from_code(9), DestroyReason::Tampered);
}

#[test]
fn control_refuses_bad_input() {
    assert!(matches!(
        Control::decode(&[]),
        Err(WireError::Length { .. })
    ));
    assert!(matches!(
        Control::decode(&[99]),
        Err(WireError::UnknownType { value: 99, .. })
    ));
    assert!(matches!(
        Control::decode(&[CTRL_DESTROY, 0, 0, 0, 0, 1]),
        Err(WireError::ZeroCircuitId)
    ));
    assert!(matches!(
        Control::decode(&[CTRL_PING, 0]),
        Err(WireError::Length { .. })
    ));
    let mut create = Control::Create {
        circ: 1,
        create: Box::new([0; CREATE_LEN]),
    }
    .encode();
    create.pop();
    assert!(matches!(
        Control::decode(&create),
        Err(WireError::Length { .. })
    ));
}

#[test]
fn extend_fragments_reassemble() {
    let next = NodeId::from_bytes([5; 32]);
    let create = [7u8; CREATE_LEN];
    let frags = extend_fragments(42, &next, &create);
    let mut whole = Vec::new();
    for (i, f) in frags.iter().enumerate() {
        assert!(f.len() <= MAX_FORWARD_BODY);
        let p = parse_fragment(f).unwrap();
        assert_eq!((p.handshake, usize::from(p.index)), (42, i));
        whole.extend_from_slice(p.bytes);
    }
    assert_eq!(&whole[..32], next.as_bytes());
    assert_eq!(&whole[32..], &create[..]);
}

#[test]
fn relay_messages_round_trip_and_clear_the_rest() {
    let mut payload = [0xAAu8; FORWARD_PAYLOAD_LEN];
    write_relay(&mut payload, RelayCommand::Data, b"hello").unwrap();
    let (cmd, range) = read_relay(&payload).unwrap();
    assert_eq!(cmd, RelayCommand::Data);
    assert_eq!(&payload[range.clone()], b"hello");
    assert!(payload[range.end..].iter().all(|&b| b == 0));
    let big = vec![0u8; MAX_FORWARD_BODY + 1];
    assert!(write_relay(&mut payload, RelayCommand::Data, &big).is_err());
    assert!(write_relay(&mut payload, RelayCommand::Data, &big[1..]).is_ok());
}

proptest! {
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1300)) {
        let _ = Control::decode(&bytes);
        let _ = read_relay(&bytes);
        let _ = parse_fragment(&bytes);
        let _ = link_cell_id(&bytes);
    }

    #[test]
    fn relay_round_trip(body in proptest::collection::vec(any::<u8>(), 0..=MAX_BACKWARD_BODY)) {
        let mut payload = [0u8; BACKWARD_PAYLOAD_LEN];
        write_relay(&mut payload, RelayCommand::Data, &body).unwrap();
        let (cmd, range) = read_relay(&payload).unwrap();
        prop_assert_eq!(cmd, RelayCommand::Data);
        prop_assert_eq!(&payload[range], &body[..]);
    }

    #[test]
    fn destroy_reason_codes_round_trip(code in any::<u8>()) {
        prop_assert_eq!(DestroyReason::from_code(code).code(), code);
    }
}
