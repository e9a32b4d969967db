//! With authorities pinned, only a consensus signed by a majority of them decides which
//! relays are used; without, the directory file does.

use std::net::SocketAddr;
use std::path::PathBuf;

use nyx_crypto::identity::IdentityKey;
use nyx_overlay::directory::consensus::{
    ConsensusError, Period, UnverifiedConsensus, Vote, compute, sign_body, vote_status,
};
use nyx_overlay::directory::testnet::{self, TestnetSpec};

use super::*;

const NOW: u64 = 1_800_000_000;

struct Files {
    dir: PathBuf,
    directory: PathBuf,
    consensus: PathBuf,
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn files(name: &str) -> Files {
    let dir = std::env::temp_dir().join(format!("nyx-trust-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Files {
        directory: dir.join("directory.txt"),
        consensus: dir.join("consensus.bin"),
        dir,
    }
}

fn authority(i: u8) -> IdentityKey {
    IdentityKey::from_seed(&[0x40 + i; 32])
}

fn hex(key: &IdentityKey) -> String {
    authority_hex(&key.public())
}

/// Five relays in the directory file; a consensus of four of them (the fifth no authority
/// voted for), signed by the authorities `signers`.
fn network(f: &Files, signers: &[u8], valid_after: u64) {
    let (_, directory) = testnet::generate(&TestnetSpec::default(), NOW - 60).unwrap();
    std::fs::write(&f.directory, directory.to_text()).unwrap();
    let listed: Vec<_> = directory.iter().take(4).map(vote_status).collect();
    let period = Period {
        valid_after,
        fresh_until: valid_after + 3600,
        valid_until: valid_after + 7200,
    };
    let votes: Vec<Vote> = (0..3)
        .map(|i| Vote {
            authority: authority(i).node_id(),
            body: nyx_overlay::directory::consensus::ConsensusBody {
                period,
                relays: listed.clone(),
            },
        })
        .collect();
    let body = compute(&votes, 3).unwrap();
    let sigs = signers
        .iter()
        .map(|&i| sign_body(&body, &authority(i)))
        .collect();
    std::fs::write(&f.consensus, UnverifiedConsensus::new(body, sigs).encode()).unwrap();
}

fn pinned() -> Vec<IdentityPublic> {
    parse_authorities(&(0..3).map(|i| hex(&authority(i))).collect::<Vec<_>>()).unwrap()
}

#[test]
fn a_majority_signed_consensus_decides_the_relays() {
    let f = files("majority");
    network(&f, &[0, 2], NOW - 10);
    let t = load(&f.directory, &f.consensus, &pinned(), NOW, None).unwrap();
    assert_eq!(t.directory.len(), 4, "only the relays of the consensus");
    assert_eq!(t.consensus_valid_after, Some(NOW - 10));
    // Without authorities the file alone is used: all five.
    let plain = load(&f.directory, &f.consensus, &[], NOW, None).unwrap();
    assert_eq!(plain.directory.len(), 5);
    assert_eq!(plain.consensus_valid_after, None);
}

#[test]
fn a_minority_signed_an_old_or_a_missing_consensus_is_not_trusted() {
    let f = files("minority");
    network(&f, &[1], NOW - 10);
    let err = load(&f.directory, &f.consensus, &pinned(), NOW, None).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Consensus {
                source: ConsensusError::NotEnoughSignatures {
                    valid: 1,
                    needed: 2
                },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("consensus.bin"), "{err}");
    network(&f, &[0, 1, 2], NOW - 10);
    let err = load(&f.directory, &f.consensus, &pinned(), NOW, Some(NOW)).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Consensus {
                source: ConsensusError::RolledBack { .. },
                ..
            }
        ),
        "{err}"
    );
    std::fs::remove_file(&f.consensus).unwrap();
    let none = load(&f.directory, &f.consensus, &pinned(), NOW, None).unwrap();
    assert!(
        none.directory.is_empty(),
        "no consensus: no relays, never the file's"
    );
}

#[test]
fn authority_keys_are_checked() {
    let good = hex(&authority(0));
    assert_eq!(
        parse_authorities(std::slice::from_ref(&good))
            .unwrap()
            .len(),
        1
    );
    for bad in ["xyz", &good[..62], &format!("{good}00")] {
        let err = parse_authorities(&[bad.to_owned()]).unwrap_err();
        assert!(err.contains("hex digits"), "{bad:?}: {err}");
    }
    let err = parse_authorities(&[good.clone(), good.to_uppercase()]).unwrap_err();
    assert!(err.contains("twice"), "{err}");
    for fields in ["", "  ", &format!("{good} 127.0.0.1:9")] {
        let err = parse_authorities(&[fields.to_owned()]).unwrap_err();
        assert!(
            err.contains("IDENTITY ADDRESS LINK_KEY"),
            "{fields:?}: {err}"
        );
    }
}

/// A whole line names where to reach the authority; `authority_line` writes what
/// `parse_authority_lines` reads, and bad addresses or link keys are refused with their
/// reason.
#[test]
fn authority_lines_carry_address_and_link_key() {
    let key = authority(1);
    let link = nyx_crypto::kem::HybridSecretKey::from_seed(&[9; nyx_crypto::kem::SEED_LEN]);
    let addr: SocketAddr = "192.0.2.7:9101".parse().unwrap();
    let line = authority_line(&key.public(), addr, link.public());
    let parsed = parse_authority_lines(&[line.clone(), hex(&authority(2))]).unwrap();
    let contact = parsed[0].contact.clone().unwrap();
    assert_eq!(parsed[0].identity, key.public());
    assert_eq!(
        (contact.node_id, contact.addr, &contact.link_key),
        (key.node_id(), addr, link.public())
    );
    assert!(parsed[1].contact.is_none(), "a key alone has no address");

    let fields: Vec<&str> = line.split(' ').collect();
    let cases = [
        (format!("{} nowhere {}", fields[0], fields[2]), "ip:port"),
        (format!("{} {} !!!", fields[0], fields[1]), "base64"),
        (format!("{} {} AAAA", fields[0], fields[1]), "not one"),
    ];
    for (bad, why) in cases {
        let err = parse_authority_lines(std::slice::from_ref(&bad)).unwrap_err();
        assert!(err.contains(why), "{bad:?}: {err}");
    }
}
