//! The consensus for networks of 1 000 and 10 000 relays and nine authorities (as many as
//! Tor has): computing it from the votes, one authority's signature, a client's check
//! (decode and verify five of nine signatures), a client's acceptance of the whole
//! bundle (the consensus plus every descriptor decoded and verified), and the sizes, printed
//! once (Tor's consensus for about 7 000 relays is a few MB of text).
//!
//! `cargo bench -p nyx-overlay --bench consensus`

#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{BatchSize, Criterion};
use nyx_crypto::identity::IdentityKey;
use nyx_overlay::directory::consensus::{
    ConsensusBody, Period, UnverifiedConsensus, Vote, compute, sign_body, vote_status,
};
use nyx_overlay::directory::request::DirResponse;
use nyx_overlay::directory::testnet::{self, TestnetSpec};
use nyx_overlay::directory::{Descriptor, Directory};

const NOW: u64 = 1_800_000_000;
const AUTHORITIES: usize = 9;

struct Network {
    relays: usize,
    directory: Directory,
    votes: Vec<Vote>,
    keys: Vec<IdentityKey>,
    body: ConsensusBody,
    consensus: Vec<u8>,
    bundle: Vec<u8>,
}

fn network(relays: usize) -> Network {
    let spec = TestnetSpec {
        nodes: relays,
        first_ip: Ipv4Addr::new(10, 0, 0, 1),
        quic_base_port: Some(9101),
        udp_base_port: None,
        ..TestnetSpec::default()
    };
    let (_, directory) = testnet::generate(&spec, NOW).unwrap();
    let keys: Vec<IdentityKey> = (0..AUTHORITIES)
        .map(|i| IdentityKey::from_seed(&[i as u8 + 1; 32]))
        .collect();
    let period = Period {
        valid_after: NOW,
        fresh_until: NOW + 3600,
        valid_until: NOW + 3 * 3600,
    };
    let statuses: Vec<_> = directory.iter().map(vote_status).collect();
    let votes: Vec<Vote> = keys
        .iter()
        .map(|k| Vote {
            authority: k.node_id(),
            body: ConsensusBody {
                period,
                relays: statuses.clone(),
            },
        })
        .collect();
    let body = compute(&votes, AUTHORITIES).unwrap();
    let signatures = keys.iter().map(|k| sign_body(&body, k)).collect();
    let consensus = UnverifiedConsensus::new(body.clone(), signatures).encode();
    let bundle = DirResponse::Consensus {
        consensus: consensus.clone(),
        descriptors: directory.iter().map(|d| d.as_bytes().to_vec()).collect(),
    }
    .encode();
    Network {
        relays,
        directory,
        votes,
        keys,
        body,
        consensus,
        bundle,
    }
}

fn bench(c: &mut Criterion, n: &Network) {
    let pinned: Vec<_> = n.keys.iter().map(IdentityKey::public).collect();
    let mut g = c.benchmark_group(format!("consensus/{}", n.relays));
    g.sample_size(10);
    g.bench_function("compute", |b| {
        b.iter(|| compute(black_box(&n.votes), AUTHORITIES).unwrap())
    });
    g.bench_function("sign", |b| {
        b.iter(|| sign_body(black_box(&n.body), &n.keys[0]))
    });
    g.bench_function("verify", |b| {
        b.iter(|| {
            UnverifiedConsensus::decode(black_box(&n.consensus))
                .unwrap()
                .verify(&pinned, NOW, None)
                .unwrap()
        })
    });
    g.bench_function("accept_bundle", |b| {
        b.iter_batched(
            || n.bundle[4..].to_vec(),
            |frame| {
                let DirResponse::Consensus {
                    consensus,
                    descriptors,
                } = DirResponse::decode(&frame).unwrap()
                else {
                    unreachable!()
                };
                let verified = UnverifiedConsensus::decode(&consensus)
                    .unwrap()
                    .verify(&pinned, NOW, None)
                    .unwrap();
                let offered = descriptors
                    .iter()
                    .map(|d| Descriptor::decode(d, NOW).unwrap());
                Directory::from_consensus(&verified, offered)
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    for relays in [1_000, 10_000] {
        let n = network(relays);
        println!(
            "consensus/{relays}: consensus {} bytes ({:.1} per relay), with every descriptor {} bytes ({:.0} per relay), {} relays listed",
            n.consensus.len(),
            n.consensus.len() as f64 / relays as f64,
            n.bundle.len(),
            n.bundle.len() as f64 / relays as f64,
            n.directory.len(),
        );
        bench(&mut c, &n);
    }
    c.final_summary();
}
