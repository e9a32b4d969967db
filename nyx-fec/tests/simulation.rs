//! Seeded simulations of a stream over lossy channels: every run must deliver the stream
//! byte-exact; the table of overhead and second rounds goes into docs/fec.md
//! (`cargo test -p nyx-fec --test simulation -- --nocapture` prints it).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod sim;

use std::time::Duration;

use nyx_fec::FecConfig;
use sim::{Channel, Loss, Outcome, run, stream};

const TICK: Duration = Duration::from_micros(100);
const LIMIT: Duration = Duration::from_secs(600);

fn config() -> FecConfig {
    // Small symbols keep the simulation fast; loss statistics do not depend on symbol size.
    FecConfig {
        symbol_size: 256,
        ..FecConfig::default()
    }
}

struct Scenario {
    name: &'static str,
    loss: Loss,
    /// Nominal average loss, for the 1/(1-p) floor.
    p: f64,
    jitter: Duration,
    duplicate: f64,
    /// Changes of the loss model: (from, model).
    steps: Vec<(Duration, Loss)>,
    blocks: usize,
}

fn scenario(name: &'static str, loss: Loss, p: f64) -> Scenario {
    Scenario {
        name,
        loss,
        p,
        jitter: Duration::ZERO,
        duplicate: 0.0,
        steps: Vec::new(),
        blocks: 200,
    }
}

fn simulate(s: &Scenario, seed: u64) -> Outcome {
    let config = config();
    let data = stream(s.blocks * config.block_bytes() - 1000, seed);
    let mut forward = Channel::new(seed * 2 + 1, s.loss);
    let mut backward = Channel::new(seed * 2 + 2, s.loss);
    for ch in [&mut forward, &mut backward] {
        ch.jitter = s.jitter;
        ch.duplicate = s.duplicate;
        ch.schedule.extend(s.steps.iter().copied());
    }
    let out = run(&config, &data, forward, backward, TICK, LIMIT);
    assert_eq!(
        out.delivered.len(),
        data.len(),
        "{}: stream incomplete",
        s.name
    );
    assert!(out.delivered == data, "{}: stream corrupted", s.name);
    out
}

fn report(s: &Scenario, out: &Outcome) -> String {
    let floor = 1.0 / (1.0 - s.p);
    format!(
        "{} | {:.3} | {:.3} | {:.2} | {} of {} ({:.1}%) | {:.1} s |",
        s.name,
        out.overhead(),
        floor,
        out.overhead() / floor,
        out.sender.second_round_blocks,
        out.sender.blocks,
        100.0 * out.second_round(),
        out.elapsed.as_secs_f64(),
    )
}

#[test]
fn iid_loss_table() {
    let mut rows = Vec::new();
    for (i, p) in [0.0, 0.01, 0.05, 0.10, 0.20, 0.30].into_iter().enumerate() {
        let s = scenario("i.i.d.", Loss::Iid(p), p);
        // Three seeds at 5%, the rate with a first-round target: 600 blocks in all.
        let seeds = if p == 0.05 { 3 } else { 1 };
        let (mut second, mut blocks) = (0, 0);
        for seed in 0..seeds {
            let out = simulate(&s, 10 + 100 * seed + i as u64);
            rows.push(format!("| {:.0}% {}", 100.0 * p, report(&s, &out)));
            second += out.sender.second_round_blocks;
            blocks += out.sender.blocks;
            if p == 0.0 {
                assert_eq!(out.sender.second_round_blocks, 0);
                assert!(out.overhead() < 1.01, "0%: overhead {}", out.overhead());
            }
            if p == 0.05 {
                assert!(out.overhead() <= 1.10, "5%: overhead {}", out.overhead());
            }
            if p == 0.20 {
                assert!(out.overhead() <= 1.35, "20%: overhead {}", out.overhead());
            }
        }
        if p == 0.05 {
            assert!(
                second * 100 <= blocks,
                "5%: {second} of {blocks} blocks needed a second round"
            );
        }
    }
    println!("{}", rows.join("\n"));
}

#[test]
fn bursty_reordering_duplicating_and_stepped_channels() {
    let mut s_b5 = scenario(
        "Gilbert-Elliott, mean burst 5",
        Loss::Bursty {
            p: 0.05,
            burst: 5.0,
        },
        0.05,
    );
    s_b5.blocks = 100;
    let mut s_b20 = scenario(
        "Gilbert-Elliott, mean burst 20",
        Loss::Bursty {
            p: 0.05,
            burst: 20.0,
        },
        0.05,
    );
    s_b20.blocks = 100;
    let mut s_reorder = scenario(
        "5% i.i.d. + reordering (jitter 20 ms)",
        Loss::Iid(0.05),
        0.05,
    );
    s_reorder.jitter = Duration::from_millis(20);
    let mut s_dup = scenario("5% i.i.d. + 10% duplication", Loss::Iid(0.05), 0.05);
    s_dup.duplicate = 0.10;
    let mut s_batch5 = scenario(
        "5%, batches of 16 lost whole",
        Loss::Batches { p: 0.05, run: 16 },
        0.05,
    );
    s_batch5.blocks = 100;
    let mut s_batch14 = scenario(
        "14%, batches of 16 lost whole",
        Loss::Batches { p: 0.14, run: 16 },
        0.14,
    );
    s_batch14.blocks = 100;
    let s_step = step_scenario();
    let mut rows = Vec::new();
    let all = [s_b5, s_b20, s_batch5, s_batch14, s_reorder, s_dup, s_step];
    for (i, s) in all.iter().enumerate() {
        let out = simulate(s, 100 + i as u64);
        rows.push(format!("| {}", report(s, &out)));
        // Every scenario stays well within the floor's neighbourhood.
        let floor = 1.0 / (1.0 - s.p.max(0.05));
        assert!(
            out.overhead() < 1.6 * floor,
            "{}: overhead {}",
            s.name,
            out.overhead()
        );
    }
    println!("{}", rows.join("\n"));
}

/// 1% loss, 15% from 2 s to 4 s, 1% again.
fn step_scenario() -> Scenario {
    let mut s = scenario("step 1% -> 15% -> 1%", Loss::Iid(0.01), 0.0);
    s.steps = vec![
        (Duration::from_secs(2), Loss::Iid(0.15)),
        (Duration::from_secs(4), Loss::Iid(0.01)),
    ];
    s.blocks = 120;
    s
}

/// Writes docs/fec/step-redundancy.svg and docs/fec/step-goodput.svg from the loss-step run:
/// `cargo test -p nyx-fec --test simulation -- --ignored plots`.
#[test]
#[ignore = "writes the plots in docs/fec/; run on purpose"]
fn plots() {
    use sim::svg::{Series, chart};
    let s = step_scenario();
    let out = simulate(&s, 102);
    let end = out.elapsed.as_secs_f64();
    let loss_at = |t: f64| if (2.0..4.0).contains(&t) { 0.15 } else { 0.01 };
    let actual: Vec<(f64, f64)> = (0..=(end * 100.0) as usize)
        .map(|i| i as f64 / 100.0)
        .map(|t| (t, loss_at(t)))
        .collect();
    let estimated: Vec<(f64, f64)> = out
        .per_block
        .iter()
        .map(|(t, p, _)| (t.as_secs_f64(), *p))
        .collect();
    let redundancy: Vec<(f64, f64)> = out
        .per_block
        .iter()
        .map(|(t, _, r)| (t.as_secs_f64(), *r))
        .collect();
    let redundancy_svg = chart(
        "Loss step 1% -> 15% -> 1%: estimate and up-front redundancy per block",
        "time (s)",
        "fraction",
        end.ceil(),
        0.3,
        &[
            Series {
                name: "channel loss rate",
                color: "#999",
                points: actual,
            },
            Series {
                name: "estimated loss",
                color: "#d62728",
                points: estimated,
            },
            Series {
                name: "up-front repair / K",
                color: "#1f77b4",
                points: redundancy,
            },
        ],
    );
    // Blocks are delivered whole (128 KiB here), so show a 500 ms moving average of the
    // 100 ms bins.
    let bins = &out.goodput;
    let goodput: Vec<(f64, f64)> = (0..bins.len())
        .map(|i| {
            let window = &bins[i.saturating_sub(2)..(i + 3).min(bins.len())];
            let mean = window.iter().sum::<u64>() as f64 / window.len() as f64;
            (i as f64 / 10.0 + 0.05, mean * 10.0 / 1e6)
        })
        .collect();
    let line_rate = 10_000.0 * f64::from(config().symbol_size) / 1e6;
    let goodput_svg = chart(
        "Loss step 1% -> 15% -> 1%: delivered goodput (500 ms moving average)",
        "time (s)",
        "MB/s",
        end.ceil(),
        line_rate * 1.5,
        &[
            Series {
                name: "line rate (10 000 packets/s)",
                color: "#999",
                points: vec![(0.0, line_rate), (end, line_rate)],
            },
            Series {
                name: "goodput",
                color: "#2ca02c",
                points: goodput,
            },
            Series {
                name: "line rate x (1 - loss)",
                color: "#ff7f0e",
                points: (0..=(end * 100.0) as usize)
                    .map(|i| i as f64 / 100.0)
                    .map(|t| (t, line_rate * (1.0 - loss_at(t))))
                    .collect(),
            },
        ],
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fec");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("step-redundancy.svg"), redundancy_svg).unwrap();
    std::fs::write(dir.join("step-goodput.svg"), goodput_svg).unwrap();
}
