//! A deterministic simulation of authorities: an in-memory bus that carries each action to
//! the right authority through the directory-stream codec, a reachability table for
//! probes, and a clock stepped to the earliest deadline. A stopped authority is never
//! polled and drops whatever is sent to it. One authority's driver may fetch votes
//! asynchronously: it answers each FetchVote only when it is next woken.

use std::collections::BTreeMap;
use std::sync::Arc;

use nyx_core::NodeId;
use nyx_crypto::identity::{IdentityKey, IdentityPublic};

use super::super::{Authority, AuthorityAction, AuthorityConfig};
use crate::directory::Descriptor;
use crate::directory::consensus::{Consensus, UnverifiedConsensus};
use crate::directory::request::{
    DirRequest, DirResponse, MAX_REQUEST_LEN, MAX_RESPONSE_LEN, frame_len,
};
use crate::directory::testnet::{self, TestnetNode, TestnetSpec};

/// One period of the simulated schedule (the default).
pub(super) const P: u64 = 3600;
/// A period start.
pub(super) const T0: u64 = 1_800_000_000;
/// The authorities start a minute into the period before T1, so they vote for T1.
pub(super) const START: u64 = T0 + 60;
/// The first period the authorities vote for.
pub(super) const T1: u64 = T0 + P;

pub(super) fn authority_key(i: usize) -> IdentityKey {
    IdentityKey::from_seed(&[0xa0 + i as u8; 32])
}

pub(super) fn pinned(n: usize) -> Vec<IdentityPublic> {
    (0..n).map(|i| authority_key(i).public()).collect()
}

/// `n` relays with descriptors signed at `START`, claiming `bandwidth`.
pub(super) fn relays(n: usize, bandwidth: u32) -> Vec<TestnetNode> {
    let spec = TestnetSpec {
        nodes: n,
        bandwidth,
        ..TestnetSpec::default()
    };
    testnet::generate(&spec, START).unwrap().0
}

/// Send `request` to `authority` and return its answer, both through their frames.
pub(super) fn call(authority: &mut Authority, request: DirRequest, now: u64) -> DirResponse {
    let frame = request.encode();
    let len = frame_len(frame[..4].try_into().unwrap(), MAX_REQUEST_LEN).unwrap();
    let request = DirRequest::decode(&frame[4..4 + len]).unwrap();
    let frame = authority.respond(request, now).encode();
    let len = frame_len(frame[..4].try_into().unwrap(), MAX_RESPONSE_LEN).unwrap();
    DirResponse::decode(&frame[4..4 + len]).unwrap()
}

/// Upload `d` to `auth`, through the frames.
pub(super) fn post(auth: &mut Authority, d: &Descriptor, now: u64) -> DirResponse {
    let request = DirRequest::PostDescriptor {
        descriptor: d.as_bytes().to_vec(),
    };
    call(auth, request, now)
}

/// The probes `auth` asks for now, by relay.
pub(super) fn probes(auth: &mut Authority, now: u64) -> Vec<NodeId> {
    std::iter::from_fn(|| auth.poll_action(now))
        .filter_map(|a| match a {
            AuthorityAction::Probe { descriptor } => Some(descriptor.node_id()),
            _ => None,
        })
        .collect()
}

/// Authorities, the relays' reachability, a clock.
pub(super) struct Net {
    pub(super) auths: Vec<Authority>,
    pub(super) up: Vec<bool>,
    /// Relays absent from the table are reachable.
    pub(super) reachable: BTreeMap<NodeId, bool>,
    pub(super) now: u64,
    /// Per authority, the `valid_after` of each consensus it published.
    pub(super) published: Vec<Vec<u64>>,
    /// Requests between authorities that were refused: (to, response).
    pub(super) refused: Vec<(usize, DirResponse)>,
    /// Probes run: (authority, relay).
    pub(super) probes: Vec<(usize, NodeId)>,
    /// Whether votes sent with PostVote are lost (so that they must be fetched).
    pub(super) lose_posted_votes: bool,
    /// The authority whose driver carries out FetchVote asynchronously: the answer is
    /// passed to it when the clock next moves, not while its actions are drained.
    pub(super) async_fetch: Option<usize>,
    /// Its fetches not answered yet.
    deferred: Vec<(usize, AuthorityAction)>,
}

impl Net {
    /// `n` authorities with the default settings changed by `tweak`, started at `START`.
    pub(super) fn new(n: usize, tweak: impl Fn(&mut AuthorityConfig)) -> Net {
        let auths = (0..n)
            .map(|i| {
                let mut config = AuthorityConfig::new(pinned(n));
                tweak(&mut config);
                Authority::new(Arc::new(authority_key(i)), config, START).unwrap()
            })
            .collect();
        Net {
            auths,
            up: vec![true; n],
            reachable: BTreeMap::new(),
            now: START,
            published: vec![Vec::new(); n],
            refused: Vec::new(),
            probes: Vec::new(),
            lose_posted_votes: false,
            async_fetch: None,
            deferred: Vec::new(),
        }
    }

    /// Upload `descriptors` to every authority that is up; each must be accepted.
    pub(super) fn post(&mut self, descriptors: &[&Descriptor]) {
        for i in 0..self.auths.len() {
            if !self.up[i] {
                continue;
            }
            for d in descriptors {
                let request = DirRequest::PostDescriptor {
                    descriptor: d.as_bytes().to_vec(),
                };
                assert_eq!(call(&mut self.auths[i], request, self.now), DirResponse::Ok);
            }
        }
        self.drain();
    }

    fn index(&self, id: NodeId) -> usize {
        self.auths.iter().position(|a| a.node_id() == id).unwrap()
    }

    /// Carry every action of the authorities that are up until none has any.
    pub(super) fn drain(&mut self) {
        for _ in 0..10_000 {
            let mut quiet = true;
            for i in 0..self.auths.len() {
                while self.up[i] {
                    let Some(action) = self.auths[i].poll_action(self.now) else {
                        break;
                    };
                    quiet = false;
                    self.deliver(i, action);
                }
            }
            if quiet {
                return;
            }
        }
        panic!("the authorities never went quiet");
    }

    fn deliver(&mut self, from: usize, action: AuthorityAction) {
        if self.async_fetch == Some(from) && matches!(action, AuthorityAction::FetchVote { .. }) {
            self.deferred.push((from, action));
            return;
        }
        self.carry(from, action);
    }

    /// The answers to the asynchronous fetches, now.
    fn answer_deferred(&mut self) {
        for (from, action) in std::mem::take(&mut self.deferred) {
            if self.up[from] {
                self.carry(from, action);
            }
        }
    }

    fn carry(&mut self, from: usize, action: AuthorityAction) {
        let now = self.now;
        if let AuthorityAction::Probe { descriptor } = &action {
            let node = descriptor.node_id();
            let ok = self.reachable.get(&node).copied().unwrap_or(true);
            self.auths[from].probed(node, descriptor.digest(), ok, now);
            self.probes.push((from, node));
            return;
        }
        if let AuthorityAction::Published { valid_after } = action {
            self.published[from].push(valid_after);
            return;
        }
        let (to, request) = action.request().unwrap();
        let to = self.index(to);
        let lost = self.lose_posted_votes && matches!(action, AuthorityAction::SendVote { .. });
        if !self.up[to] || lost {
            return;
        }
        let fetch = matches!(action, AuthorityAction::FetchVote { .. });
        match call(&mut self.auths[to], request, now) {
            DirResponse::Vote { vote } if fetch => {
                if let Err(e) = self.auths[from].handle_vote(&vote, now) {
                    self.refused.push((from, DirResponse::refused(e)));
                }
            }
            DirResponse::Ok => {}
            other => self.refused.push((to, other)),
        }
    }

    /// Run the authorities that are up until `end`, stepping the clock to each deadline
    /// (and answering the asynchronous fetches after each step).
    pub(super) fn run_until(&mut self, end: u64) {
        loop {
            self.answer_deferred();
            self.drain();
            let next = (0..self.auths.len())
                .filter(|&i| self.up[i])
                .filter_map(|i| self.auths[i].next_deadline())
                .min();
            match next {
                Some(t) if t <= end => self.now = self.now.max(t),
                _ => {
                    self.now = end;
                    self.answer_deferred();
                    self.drain();
                    return;
                }
            }
        }
    }

    /// What authority `i` serves to a client holding nothing, decoded (not verified).
    pub(super) fn served(&mut self, i: usize) -> Option<(UnverifiedConsensus, Vec<Descriptor>)> {
        let now = self.now;
        match call(
            &mut self.auths[i],
            DirRequest::GetConsensus { newer_than: 0 },
            now,
        ) {
            DirResponse::Consensus {
                consensus,
                descriptors,
            } => {
                let c = UnverifiedConsensus::decode(&consensus).unwrap();
                let d = descriptors
                    .iter()
                    .map(|d| Descriptor::decode(d, now).unwrap())
                    .collect();
                Some((c, d))
            }
            DirResponse::NotFound => None,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// What authority `i` serves, verified as a client pinning every authority would.
    pub(super) fn verified(&mut self, i: usize) -> Consensus {
        let n = self.auths.len();
        let (c, _) = self.served(i).unwrap();
        c.verify(&pinned(n), self.now, None).unwrap()
    }
}
