use super::*;

fn t(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

#[test]
fn ack_state_builds_the_bitmap_and_spots_duplicates() {
    let mut a = AckState::default();
    for pn in [0, 1, 2, 4, 7] {
        assert!(a.on_packet(pn, true, t(1)));
    }
    assert!(!a.on_packet(4, true, t(1)), "duplicate");
    assert!(a.on_packet(5, true, t(1)), "late but new");
    let ack = a.take(t(3)).unwrap();
    assert_eq!(ack.largest, 7);
    assert_eq!(ack.delay, Duration::from_millis(2));
    let got: Vec<u32> = (0..=7).filter(|&pn| ack.covers(pn)).collect();
    assert_eq!(got, vec![0, 1, 2, 4, 5, 7]);
    assert!(!a.has_pending());
    // A jump within the bitmap keeps the old packets...
    a.on_packet(200, true, t(4));
    let ack = a.take(t(4)).unwrap();
    assert_eq!(ack.largest, 200);
    let got: Vec<u32> = (0..200).filter(|&pn| ack.covers(pn)).collect();
    assert_eq!(got, vec![0, 1, 2, 4, 5, 7]);
    // ...and a jump beyond it forgets them.
    a.on_packet(200 + 513, true, t(4));
    assert_eq!(a.take(t(4)).unwrap().bitmap, [0; ACK_WORDS]);
}

/// Whatever order packets arrive in, the ACK reports exactly the packets received among
/// the 512 below the largest, and a packet is fresh exactly once.
#[test]
fn ack_state_matches_a_set_of_received_packets() {
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    proptest!(|(steps in proptest::collection::vec((0u32..3, 0u32..700), 1..300))| {
        let mut a = AckState::default();
        let mut seen = BTreeSet::new();
        let mut pn = 1_000u32;
        for (kind, n) in steps {
            // Mostly forward by a little, sometimes a jump, sometimes back (late or duplicate).
            pn = match kind {
                0 => pn + n % 70,
                1 => pn + n,
                _ => pn.saturating_sub(n),
            };
            let fresh = a.on_packet(pn, true, t(1));
            let largest = *seen.last().unwrap_or(&pn);
            // Packets older than the bitmap cannot be told apart and count as fresh.
            let told = pn + ACK_WIDE_BITS >= largest;
            prop_assert_eq!(fresh, !seen.contains(&pn) || !told, "pn {}", pn);
            seen.insert(pn);
            let ack = a.take(t(1)).unwrap();
            let top = *seen.last().unwrap();
            prop_assert_eq!(ack.largest, top);
            for q in top.saturating_sub(ACK_WIDE_BITS + 8)..=top + 1 {
                let expect = seen.contains(&q) && q + ACK_WIDE_BITS >= top;
                prop_assert_eq!(ack.covers(q), expect, "pn {} largest {}", q, top);
            }
        }
    });
}

#[test]
fn acks_wait_an_eighth_of_a_known_round_trip_within_bounds() {
    let floor = Duration::from_millis(2);
    let mut rtt = Rtt::default();
    assert_eq!(
        rtt.ack_delay(floor),
        floor,
        "the initial guess is not a measurement"
    );
    rtt.seed(Duration::from_millis(40));
    assert_eq!(rtt.ack_delay(floor), Duration::from_millis(5));
    rtt.update(Duration::from_millis(4));
    assert_eq!(rtt.ack_delay(floor), floor, "a short path keeps the floor");
    let mut far = Rtt::default();
    far.update(Duration::from_millis(300));
    assert_eq!(far.ack_delay(floor), MAX_ACK_DELAY);
    assert_eq!(
        far.ack_delay(Duration::from_millis(40)),
        Duration::from_millis(40)
    );
}

#[test]
fn ack_due_by_count_or_delay() {
    let mut a = AckState::default();
    let d = Duration::from_millis(2);
    assert!(!a.due(t(0), 4, d));
    a.on_packet(0, true, t(10));
    assert!(!a.due(t(11), 4, d));
    assert!(a.due(t(12), 4, d));
    for pn in 1..4 {
        a.on_packet(pn, true, t(10));
    }
    assert!(a.due(t(10), 4, d));
    a.take(t(10));
    a.on_packet(9, false, t(10));
    assert!(!a.has_pending(), "a bare ACK elicits nothing");
}

#[test]
fn acks_settle_packets_measure_rtt_and_find_losses() {
    let mut s = SentPackets::default();
    for i in 0..20u64 {
        let controls = if i == 3 {
            vec![Control::Opened {
                stream: super::super::StreamId(1),
            }]
        } else {
            Vec::new()
        };
        s.on_sent(t(i), true, controls);
    }
    assert_eq!(s.in_flight(), 20);
    // Everything but 3 and 19 arrives; the ACK leaves at 30 ms, delay 1 ms.
    let mut bitmap = [0u64; ACK_WORDS];
    for pn in 0..18u32 {
        if pn != 3 {
            bitmap[0] |= 1 << (18 - 1 - pn);
        }
    }
    let ack = Ack {
        largest: 18,
        delay: Duration::from_millis(1),
        bitmap,
    };
    let settled = s.on_ack(&ack, t(30)).unwrap();
    assert_eq!(settled.acked, 18);
    assert_eq!(settled.rtt, Some(Duration::from_millis(11)));
    assert_eq!(settled.lost, 1, "packet 3 is 15 behind the largest");
    assert_eq!(settled.lost_controls.len(), 1);
    assert_eq!(s.in_flight(), 1, "packet 19 is still in flight");
    // An ACK for a packet never sent is refused.
    let bogus = Ack {
        largest: 500,
        ..ack
    };
    assert!(s.on_ack(&bogus, t(31)).is_none());
    // The same ACK again settles nothing.
    let again = s.on_ack(&ack, t(31)).unwrap();
    assert_eq!((again.acked, again.lost), (0, 0));
}

#[test]
fn the_time_threshold_finds_a_lost_tail() {
    let mut s = SentPackets::default();
    s.on_sent(t(0), true, Vec::new());
    s.on_sent(t(0), true, Vec::new());
    s.on_sent(t(1), true, Vec::new());
    let ack = Ack {
        largest: 2,
        delay: Duration::ZERO,
        bitmap: [0b10, 0, 0, 0, 0, 0, 0, 0], // 0 arrived, 1 did not
    };
    let first = s.on_ack(&ack, t(11)).unwrap();
    assert_eq!((first.acked, first.lost), (2, 0), "1 is only 1 behind");
    let deadline = s.loss_deadline().unwrap();
    assert!(deadline > t(11));
    let later = s.on_loss_timer(deadline);
    assert_eq!(later.lost, 1);
    assert_eq!(s.in_flight(), 0);
    assert!(s.loss_deadline().is_none());
}
