//! nyx-fec hot paths next to the raw `raptorq` crate doing the same work in the same group.
//!
//! * `codec/encode/*`: a `Sender` turning a whole stream into packets (source symbols and
//!   the up-front repair its controller chooses at its prior loss estimate) vs `raw_blocks`:
//!   `raptorq::SourceBlockEncoder` on the same blocks producing the same symbols, and
//!   `raw_object`: `raptorq::Encoder::with_defaults` on the whole stream (its own blocking).
//! * `codec/decode/*`: a `Receiver` taking every block's packets with the first R source
//!   symbols of each block lost (so every block is really decoded, from exactly K symbols)
//!   vs `raw_blocks`: `raptorq::SourceBlockDecoder` fed the same symbols;
//!   `codec/decode_spare/*`: R/2 lost, so the up-front repair leaves symbols to spare.
//! * controller benches under the names of the original NyxNet report.

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nyx_core::Timestamp;
use nyx_fec::controller::{LossEstimator, Redundancy};
use nyx_fec::packet::{SYMBOL_HEADER_LEN, SymbolHeader};
use nyx_fec::{FecConfig, Receiver, Sender};
use raptorq::{
    EncodingPacket, ObjectTransmissionInformation, PayloadId, SourceBlockDecoder,
    SourceBlockEncoder,
};

/// About the overlay's cell symbol sizes (1032 bytes forward, 1064 backward; each packet 16
/// bytes more).
const SYMBOL: u16 = 1024;
const SIZES: [(&str, usize); 3] = [("64KiB", 64 << 10), ("1MiB", 1 << 20), ("10MiB", 10 << 20)];

fn config() -> FecConfig {
    FecConfig {
        symbol_size: SYMBOL,
        max_blocks_in_flight: 64,
        ..FecConfig::default()
    }
}

fn data(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8)
        .collect()
}

/// Encode the whole stream with our sender; `keep` collects the packets (for setting up the
/// other benches), otherwise they are only counted, as the raw baselines count theirs.
fn encode_ours(data: &[u8], keep: bool) -> (usize, Vec<Vec<u8>>) {
    let now = Timestamp::ZERO;
    let mut tx = Sender::new(config(), now).expect("config");
    let mut written = 0;
    let mut packets = Vec::new();
    let mut count = 0;
    let mut buf = vec![0u8; SYMBOL_HEADER_LEN + usize::from(SYMBOL)];
    while written < data.len() {
        written += tx.write(&data[written..], now).expect("write");
        tx.flush(now).expect("flush");
        while let Some(n) = tx.poll_transmit(now, &mut buf).expect("poll") {
            count += 1;
            if keep {
                packets.push(buf[..n].to_vec());
            } else {
                black_box(&buf[..n]);
            }
        }
    }
    (count, packets)
}

fn block_config(k: usize) -> ObjectTransmissionInformation {
    ObjectTransmissionInformation::new((k * usize::from(SYMBOL)) as u64, SYMBOL, 1, 1, 1)
}

/// The block structure our sender used: (offset, K, repair count) per block.
fn blocks(packets: &[Vec<u8>]) -> Vec<(usize, usize, u32)> {
    let mut out: Vec<(usize, usize, u32)> = Vec::new();
    let mut offset = 0;
    for p in packets {
        let (h, _) = SymbolHeader::parse(p, SYMBOL).expect("ours");
        let k = usize::from(h.symbols);
        if out.len() <= h.block as usize {
            out.push((offset, k, 0));
            offset += h.block_len(SYMBOL);
        }
        if h.esi as usize >= k {
            out[h.block as usize].2 += 1;
        }
    }
    out
}

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("codec");
    g.sample_size(10);
    for (name, len) in SIZES {
        let stream = data(len);
        let (_, packets) = encode_ours(&stream, true);
        let shape = blocks(&packets);
        g.throughput(Throughput::Bytes(len as u64));

        g.bench_function(BenchmarkId::new("encode", name), |b| {
            b.iter(|| black_box(encode_ours(&stream, false).0))
        });
        g.bench_function(BenchmarkId::new("encode_raw_blocks", name), |b| {
            b.iter(|| {
                let mut n = 0;
                for &(offset, k, repair) in &shape {
                    let t = usize::from(SYMBOL);
                    let mut block = stream[offset..(offset + k * t).min(stream.len())].to_vec();
                    block.resize(k * t, 0);
                    let enc = SourceBlockEncoder::new(0, &block_config(k), &block);
                    n += enc.source_packets().len();
                    if repair > 0 {
                        n += enc.repair_packets(0, repair).len();
                    }
                }
                black_box(n)
            })
        });
        let repair_per_block = shape.first().map_or(0, |s| s.2);
        g.bench_function(BenchmarkId::new("encode_raw_object", name), |b| {
            b.iter(|| {
                let enc = raptorq::Encoder::with_defaults(&stream, SYMBOL);
                black_box(enc.get_encoded_packets(repair_per_block).len())
            })
        });

        // Receiving on a loss-free path: every packet in order (the source symbols and the
        // up-front repair), read as it comes.
        g.bench_function(BenchmarkId::new("receive_clean", name), |b| {
            let mut out = vec![0u8; 64 * 1024];
            b.iter_batched(
                || Receiver::new(config()).expect("config"),
                |mut rx| {
                    let mut got = 0;
                    for p in &packets {
                        rx.handle_packet(p, Timestamp::ZERO).expect("packet");
                        got += rx.read(&mut out);
                    }
                    assert_eq!(got, len);
                    black_box(got)
                },
                BatchSize::PerIteration,
            )
        });

        // Decoding: lose the first `repair` source symbols of every block, so each block needs
        // all its repair symbols and a real RaptorQ decode at exactly K (the last block once
        // the receiver's timer says no more symbols come). `decode_spare` loses half as many,
        // the usual first round, where the up-front repair leaves symbols to spare.
        let lose = |share: u32| -> Vec<Vec<u8>> {
            packets
                .iter()
                .filter(|p| {
                    let (h, _) = SymbolHeader::parse(p, SYMBOL).expect("ours");
                    h.esi >= shape[h.block as usize].2 / share
                })
                .cloned()
                .collect()
        };
        let kept = lose(1);
        for (bench, kept) in [("decode", kept.clone()), ("decode_spare", lose(2))] {
            g.bench_function(BenchmarkId::new(bench, name), |b| {
                b.iter_batched(
                    || Receiver::new(config()).expect("config"),
                    |mut rx| {
                        for p in &kept {
                            rx.handle_packet(p, Timestamp::ZERO).expect("packet");
                        }
                        rx.handle_timeout(Timestamp::from_secs(1));
                        assert_eq!(rx.readable(), len);
                        black_box(rx.readable())
                    },
                    BatchSize::PerIteration,
                )
            });
        }
        g.bench_function(BenchmarkId::new("decode_raw_blocks", name), |b| {
            b.iter(|| {
                let mut total = 0;
                let mut decoders: Vec<SourceBlockDecoder> = shape
                    .iter()
                    .map(|&(_, k, _)| {
                        SourceBlockDecoder::new(
                            0,
                            &block_config(k),
                            (k * usize::from(SYMBOL)) as u64,
                        )
                    })
                    .collect();
                for p in &kept {
                    let (h, symbol) = SymbolHeader::parse(p, SYMBOL).expect("ours");
                    let packet = EncodingPacket::new(PayloadId::new(0, h.esi), symbol.to_vec());
                    if let Some(block) = decoders[h.block as usize].decode(std::iter::once(packet))
                    {
                        total += block.len();
                    }
                }
                black_box(total)
            })
        });
    }
    g.finish();
}

/// Cumulative counters of `n` feedback intervals of 250 packets at 5% loss.
fn counters(n: usize) -> Vec<(u32, u32, u32)> {
    (1..=n as u32)
        .map(|i| (250 * i, 250 * i - 12 * i - (i % 3), 11 * i))
        .collect()
}

fn controller(c: &mut Criterion) {
    let mut g = c.benchmark_group("adaptive_redundancy");
    // One real update: feed a feedback report to the estimator and choose a block's repair.
    g.bench_function("single_update", |b| {
        let mut est = LossEstimator::default();
        let ctl = Redundancy::new(0.005, 1.0);
        let mut i = 0u32;
        b.iter(|| {
            i = i.wrapping_add(1);
            est.update(250 * i, 250 * i - 12 * i, 11 * i);
            black_box(ctl.repair_symbols(512, est.loss(), est.dispersion()))
        })
    });
    for n in [10, 50, 100, 500] {
        let reports = counters(n);
        g.bench_with_input(
            BenchmarkId::new("batch_updates", n),
            &reports,
            |b, reports| {
                b.iter(|| {
                    let mut est = LossEstimator::default();
                    let ctl = Redundancy::new(0.005, 1.0);
                    let mut total = 0;
                    for &(e, r, u) in reports {
                        est.update(e, r, u);
                        total += ctl.repair_symbols(512, est.loss(), est.dispersion());
                    }
                    black_box(total)
                })
            },
        );
    }
    g.finish();

    let mut g = c.benchmark_group("pid_controller");
    // The trim loop after a loss step (frequent second rounds) and at steady state.
    g.bench_function(BenchmarkId::new("pid_adaptation", "responsive"), |b| {
        let mut ctl = Redundancy::new(0.005, 1.0);
        let mut i = 0u32;
        b.iter(|| {
            i = i.wrapping_add(1);
            ctl.on_block(i.is_multiple_of(4));
            black_box(ctl.repair_symbols(512, 0.15, 1.0))
        })
    });
    g.bench_function(BenchmarkId::new("pid_adaptation", "stable"), |b| {
        let mut ctl = Redundancy::new(0.005, 1.0);
        let mut i = 0u32;
        b.iter(|| {
            i = i.wrapping_add(1);
            ctl.on_block(i.is_multiple_of(200));
            black_box(ctl.repair_symbols(512, 0.05, 1.0))
        })
    });
    g.finish();

    let mut g = c.benchmark_group("memory_allocation");
    g.bench_function("create_tuner", |b| {
        b.iter(|| black_box((LossEstimator::default(), Redundancy::new(0.005, 1.0))))
    });
    g.finish();
}

criterion_group!(benches, codec, controller);
criterion_main!(benches);
