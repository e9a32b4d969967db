use std::time::Duration;

use nyx_node::{CircuitHandle, NodeEvent, NodeId};

use super::*;
use crate::telemetry::{MetricsSnapshot, render_prometheus};

const BOUNDS: &[f64] = &[0.5, 1.0, 5.0];

#[test]
fn observations_land_in_cumulative_buckets_with_sum_and_count() {
    let h = Histogram::new(BOUNDS);
    for v in [0.1, 0.5, 0.7, 3.0, 9.0, f64::NAN] {
        h.observe(v);
    }
    h.observe_duration(Duration::from_millis(250));
    let m = h.snapshot("nyx_test_seconds", "Test.");
    // At or below 0.5: 0.1, 0.5, 0.25; at or below 1: + 0.7; at or below 5: + 3; all: + 9.
    assert_eq!(m.cumulative, [3, 4, 5, 6]);
    assert_eq!(m.count(), 6);
    assert!((m.sum - 13.55).abs() < 1e-9, "{}", m.sum);
}

#[test]
fn histograms_render_as_bucket_sum_and_count_lines() {
    let h = Histogram::new(BOUNDS);
    h.observe(0.7);
    h.observe(2.0);
    let s = MetricsSnapshot {
        histograms: vec![
            h.snapshot("nyx_test_bytes", "Bytes.")
                .with_label("direction", "sent"),
            Histogram::new(BOUNDS)
                .snapshot("nyx_test_bytes", "ignored")
                .with_label("direction", "received"),
            h.snapshot("nyx_bad_total", "a histogram may not end in _total"),
            h.snapshot("nyx_bad_le", "le is taken")
                .with_label("le", "1"),
        ],
        ..MetricsSnapshot::default()
    };
    let text = render_prometheus(&s);
    let tail: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("# HELP nyx_test_bytes"))
        .collect();
    assert_eq!(
        tail,
        [
            "# HELP nyx_test_bytes Bytes.",
            "# TYPE nyx_test_bytes histogram",
            "nyx_test_bytes_bucket{direction=\"sent\",le=\"0.5\"} 0",
            "nyx_test_bytes_bucket{direction=\"sent\",le=\"1\"} 1",
            "nyx_test_bytes_bucket{direction=\"sent\",le=\"5\"} 2",
            "nyx_test_bytes_bucket{direction=\"sent\",le=\"+Inf\"} 2",
            "nyx_test_bytes_sum{direction=\"sent\"} 2.7",
            "nyx_test_bytes_count{direction=\"sent\"} 2",
            "nyx_test_bytes_bucket{direction=\"received\",le=\"0.5\"} 0",
            "nyx_test_bytes_bucket{direction=\"received\",le=\"1\"} 0",
            "nyx_test_bytes_bucket{direction=\"received\",le=\"5\"} 0",
            "nyx_test_bytes_bucket{direction=\"received\",le=\"+Inf\"} 0",
            "nyx_test_bytes_sum{direction=\"received\"} 0",
            "nyx_test_bytes_count{direction=\"received\"} 0",
        ]
    );
}

#[test]
fn stream_histograms_are_four_families_with_fixed_labels() {
    let streams = StreamHistograms::default();
    streams.first_byte.observe(0.2);
    streams.sent.observe(100.0);
    streams.received.observe(2_000_000.0);
    streams.duration.observe(3.0);
    let all = streams.snapshot();
    let names: Vec<(&str, &[(&str, &str)])> =
        all.iter().map(|h| (h.name, h.labels.as_slice())).collect();
    assert_eq!(
        names,
        [
            ("nyx_stream_first_byte_seconds", &[][..]),
            ("nyx_stream_bytes", &[("direction", "sent")][..]),
            ("nyx_stream_bytes", &[("direction", "received")][..]),
            ("nyx_stream_duration_seconds", &[][..]),
        ]
    );
    assert!(all.iter().all(|h| h.count() == 1 && h.is_valid()));
    // 2 MB is above 512 KiB and at or below 4 MiB.
    let received = &all[2];
    let bucket = received.bounds.partition_point(|&b| b < 2_000_000.0);
    assert_eq!(received.bounds[bucket], 4_194_304.0);
    assert_eq!(received.cumulative[bucket - 1], 0);
    assert_eq!(received.cumulative[bucket], 1);
}

/// Multi-hop builds are observed, one-hop (directory) builds and other events are not,
/// and the task ends with the node.
#[tokio::test]
async fn circuit_builds_are_observed_from_node_events() {
    let (tx, rx) = tokio::sync::broadcast::channel(16);
    let builds = Arc::new(Histogram::new(LATENCY_SECONDS));
    let task = tokio::spawn(record_circuit_builds(rx, Arc::clone(&builds)));
    let hop = |b: u8| NodeId::from_bytes([b; 32]);
    let built = |hops: usize, ms: u64| NodeEvent::CircuitBuilt {
        circuit: CircuitHandle::from_id(hops as u64 * 1000 + ms),
        path: (0..hops).map(|i| hop(i as u8)).collect(),
        build_time: Duration::from_millis(ms),
    };
    tx.send(built(3, 300)).unwrap();
    tx.send(built(3, 1200)).unwrap();
    tx.send(built(1, 10)).unwrap();
    tx.send(NodeEvent::DirectoryChanged { relays: 5 }).unwrap();
    drop(tx);
    task.await.unwrap();
    let m = builds.snapshot(CIRCUIT_BUILD_SECONDS, CIRCUIT_BUILD_HELP);
    assert_eq!(m.count(), 2);
    assert!((m.sum - 1.5).abs() < 1e-9, "{}", m.sum);
    // 0.3 s is in the 0.5 s bucket, 1.2 s first in the 2.5 s one.
    assert_eq!(&m.cumulative[..6], [0, 0, 0, 1, 1, 2]);
}
