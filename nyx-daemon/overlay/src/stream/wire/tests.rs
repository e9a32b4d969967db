use super::*;
use proptest::prelude::*;

fn control() -> impl Strategy<Value = Control> {
    let stream = (1u32..).prop_map(StreamId);
    prop_oneof![
        (stream.clone(), "[a-z0-9.:-]{0,255}")
            .prop_map(|(stream, target)| Control::Open { stream, target }),
        stream.clone().prop_map(|stream| Control::Opened { stream }),
        stream.clone().prop_map(|stream| Control::Done { stream }),
        (stream.clone(), any::<u64>()).prop_map(|(stream, offset)| Control::Fin { stream, offset }),
        (stream.clone(), 1u8..=7).prop_map(|(stream, c)| Control::Reset {
            stream,
            reason: ResetReason::from_code(c)
        }),
        (stream, any::<u64>()).prop_map(|(stream, max)| Control::MaxData { stream, max }),
    ]
}

proptest! {
    #[test]
    fn packets_round_trip(
        pn in any::<u32>(),
        largest in any::<u32>(),
        delay_units in any::<u16>(),
        bitmap in any::<[u64; ACK_WORDS]>(),
        wide in any::<bool>(),
        controls in proptest::collection::vec(control(), 0..4),
        body in proptest::collection::vec(any::<u8>(), 0..600),
        stream in 1u32..,
    ) {
        let mut out = vec![0u8; 4096];
        let ack = Ack {
            largest,
            delay: Duration::from_micros(u64::from(delay_units) * 10),
            bitmap,
        };
        let mut at = write_header(&mut out, pn);
        let end = if wide {
            write_ack_wide(&mut out, at, &ack)
        } else {
            write_ack(&mut out, at, &ack)
        };
        prop_assert_eq!(end - at, if wide { ACK_WIDE_LEN } else { ACK_LEN });
        at = end;
        // A short ACK carries the first word only; the rest reads as not reported.
        let mut sent = ack;
        if !wide {
            sent.bitmap[1..].fill(0);
        }
        for c in &controls {
            let end = write_control(&mut out, at, c);
            prop_assert_eq!(end - at, c.len());
            at = end;
        }
        at = write_ping(&mut out, at);
        let start = write_carrier(&mut out, at, false, StreamId(stream), body.len());
        out[start..start + body.len()].copy_from_slice(&body);
        at = start + body.len();
        let start = write_carrier(&mut out, at, true, StreamId(stream), body.len());
        out[start..start + body.len()].copy_from_slice(&body);
        at = start + body.len();

        let (got_pn, frames) = parse_packet(&out[..at]).unwrap();
        prop_assert_eq!(got_pn, pn);
        let frames: Vec<_> = frames.collect::<Result<_, _>>().unwrap();
        let mut expect = vec![Frame::Ack(sent)];
        expect.extend(controls.iter().cloned().map(Frame::Control));
        expect.push(Frame::Ping);
        expect.push(Frame::Symbol { stream: StreamId(stream), packet: &body });
        expect.push(Frame::Feedback { stream: StreamId(stream), feedback: &body });
        prop_assert_eq!(frames, expect);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
        if let Ok((_, frames)) = parse_packet(&bytes) {
            for f in frames {
                if f.is_err() {
                    break;
                }
            }
        }
    }
}

#[test]
fn truncation_and_bad_fields_are_typed() {
    assert_eq!(
        parse_packet(&[0, 0, 1]).unwrap_err(),
        WireError::Truncated {
            what: "packet header"
        }
    );
    fn first(b: &[u8]) -> Result<Frame<'_>, WireError> {
        parse_packet(b).unwrap().1.next().unwrap()
    }
    assert_eq!(
        first(&[0, 0, 0, 1, 0x7f]),
        Err(WireError::UnknownFrame(0x7f))
    );
    assert_eq!(
        first(&[0, 0, 0, 1, OPENED, 0, 0, 0, 0]),
        Err(WireError::ZeroStream)
    );
    assert_eq!(
        first(&[0, 0, 0, 1, OPEN, 0, 0, 0, 1, 2, 0xff, 0xfe]),
        Err(WireError::BadTarget)
    );
    assert_eq!(
        first(&[0, 0, 0, 1, SYMBOL, 0, 0, 0, 1, 0, 9, 1, 2]),
        Err(WireError::Truncated {
            what: "SYMBOL/FEEDBACK body"
        })
    );
}

#[test]
fn ack_covers_largest_and_bitmap_only() {
    let mut bitmap = [0; ACK_WORDS];
    bitmap[0] = 0b101;
    let ack = Ack {
        largest: 100,
        delay: Duration::ZERO,
        bitmap,
    };
    assert!(ack.covers(100));
    assert!(ack.covers(99));
    assert!(!ack.covers(98));
    assert!(ack.covers(97));
    assert!(!ack.covers(101));
    assert!(!ack.covers(100 - 65));
    let low = Ack {
        largest: 0,
        delay: Duration::ZERO,
        bitmap: [u64::MAX; ACK_WORDS],
    };
    assert!(low.covers(0));
    assert!(!low.covers(u32::MAX));
    // Word w, bit i: packet largest - 1 - 64 w - i, up to 512 back and no further.
    let mut bitmap = [0; ACK_WORDS];
    bitmap[1] = 1 << 3;
    bitmap[7] = 1 << 63;
    let wide = Ack {
        largest: 1000,
        delay: Duration::ZERO,
        bitmap,
    };
    let got: Vec<u32> = (0..1000).filter(|&pn| wide.covers(pn)).collect();
    assert_eq!(got, vec![1000 - 512, 1000 - 1 - 64 - 3]);
    let all = Ack {
        largest: 1000,
        ..low
    };
    assert!(!all.covers(1000 - 513));
}

#[test]
fn a_wide_ack_says_what_its_short_form_says_and_more() {
    let mut bitmap = [0; ACK_WORDS];
    bitmap[0] = 0xdead_beef;
    bitmap[5] = 0x1234;
    let ack = Ack {
        largest: 7_000,
        delay: Duration::from_micros(120),
        bitmap,
    };
    let mut out = [0u8; 128];
    let short = write_ack(&mut out, 0, &ack);
    let wide = write_ack_wide(&mut out, short, &ack);
    assert_eq!((short, wide), (ACK_LEN, ACK_LEN + ACK_WIDE_LEN));
    assert_eq!((out[0], out[ACK_LEN]), (ACK, ACK_WIDE));
    let mut packet = vec![0, 0, 0, 1];
    packet.extend_from_slice(&out[..wide]);
    let frames: Vec<_> = parse_packet(&packet).unwrap().1.collect();
    let (Ok(Frame::Ack(a)), Ok(Frame::Ack(b))) = (&frames[0], &frames[1]) else {
        panic!("{frames:?}");
    };
    for pn in 6_000..=7_000 {
        if (7_000 - 64..=7_000).contains(&pn) {
            assert_eq!(a.covers(pn), b.covers(pn), "{pn}");
        } else {
            assert!(!a.covers(pn), "{pn}");
        }
        assert_eq!(b.covers(pn), ack.covers(pn), "{pn}");
    }
    assert_eq!(*b, ack);
    // One byte short of a whole ACK_WIDE is a typed error.
    packet.truncate(packet.len() - 1);
    let last = parse_packet(&packet).unwrap().1.nth(1).unwrap();
    assert_eq!(last, Err(WireError::Truncated { what: "ACK_WIDE" }));
}
