//! Declared relay families (Tor's `MyFamily`): the relays an operator says are run by the same
//! people, which no circuit should go through twice.
//!
//! A descriptor lists the NodeIds its relay declares, at most [`MAX_FAMILY`], sorted strictly
//! ascending (so no duplicates and one encoding per set), never the relay's own id. Two relays
//! are in one family only when *each* declares the other ([`same_family`]): a relay cannot
//! pull an honest relay into its family by naming it, which would let it keep that relay out
//! of every path it is in.

use nyx_core::NodeId;

use super::codec::Reader;
use super::{Descriptor, DescriptorError};

/// Most relays one descriptor may declare as its family.
pub const MAX_FAMILY: usize = 32;

const FIELD: &str = "family";

fn malformed(reason: String) -> DescriptorError {
    DescriptorError::Malformed {
        field: FIELD,
        reason,
    }
}

/// Append a family: count (1 byte), then each NodeId (32 bytes). `family` is checked
/// ([`check_family`]) before, so the count fits.
pub(super) fn put_family(out: &mut Vec<u8>, family: &[NodeId]) {
    out.push(u8::try_from(family.len()).unwrap_or(u8::MAX));
    for id in family.iter().take(usize::from(u8::MAX)) {
        out.extend_from_slice(id.as_bytes());
    }
}

/// Read a family written by [`put_family`]: the layout only (count at most [`MAX_FAMILY`]);
/// [`check_family`] judges the ids once the signature is known to be good.
pub(super) fn get_family(r: &mut Reader<'_>) -> Result<Vec<NodeId>, DescriptorError> {
    let count = usize::from(r.u8(FIELD)?);
    check_count(count)?;
    (0..count)
        .map(|_| r.array::<{ NodeId::LEN }>(FIELD).map(NodeId::from_bytes))
        .collect()
}

fn check_count(count: usize) -> Result<(), DescriptorError> {
    if count > MAX_FAMILY {
        return Err(malformed(format!("{count} relays, at most {MAX_FAMILY}")));
    }
    Ok(())
}

/// Refuse a family of more than [`MAX_FAMILY`] relays, one naming `own` (the relay itself),
/// one naming a relay twice, and one not sorted ascending.
pub(super) fn check_family(own: NodeId, family: &[NodeId]) -> Result<(), DescriptorError> {
    check_count(family.len())?;
    if family.contains(&own) {
        return Err(malformed(format!("lists the relay's own id {own}")));
    }
    for pair in family.windows(2) {
        if pair[0] == pair[1] {
            return Err(malformed(format!("lists {} twice", pair[0])));
        }
        if pair[0] > pair[1] {
            return Err(malformed(format!(
                "{} is listed before {}: not in ascending order",
                pair[0], pair[1]
            )));
        }
    }
    Ok(())
}

/// Whether `a` and `b` are one family: distinct relays that each declare the other. A
/// declaration the other relay does not return means nothing.
pub fn same_family(a: &Descriptor, b: &Descriptor) -> bool {
    a.node_id() != b.node_id() && a.declares(&b.node_id()) && b.declares(&a.node_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(bytes: &[u8]) -> Vec<NodeId> {
        bytes.iter().map(|b| NodeId::from_bytes([*b; 32])).collect()
    }

    #[test]
    fn a_family_round_trips_and_every_cut_is_truncated() {
        for family in [ids(&[]), ids(&[1]), ids(&(1..=32).collect::<Vec<u8>>())] {
            let mut out = Vec::new();
            put_family(&mut out, &family);
            assert_eq!(out.len(), 1 + 32 * family.len());
            let mut r = Reader::new(&out);
            assert_eq!(get_family(&mut r).unwrap(), family);
            assert_eq!(r.remaining(), 0);
            for cut in 0..out.len() {
                let err = get_family(&mut Reader::new(&out[..cut])).unwrap_err();
                assert!(matches!(
                    err,
                    DescriptorError::Truncated {
                        field: "family",
                        ..
                    }
                ));
            }
        }
    }

    #[test]
    fn oversize_own_duplicate_and_unsorted_families_are_refused() {
        let own = NodeId::from_bytes([0xee; 32]);
        let reason = |family: &[NodeId]| match check_family(own, family) {
            Err(DescriptorError::Malformed { field, reason }) => {
                assert_eq!(field, "family");
                reason
            }
            other => panic!("{other:?}"),
        };
        let long = ids(&(1..=33).collect::<Vec<u8>>());
        assert_eq!(reason(&long), "33 relays, at most 32");
        assert!(reason(&[ids(&[1])[0], own]).contains("own id"));
        assert!(reason(&ids(&[1, 2, 2])).contains("twice"));
        assert!(reason(&ids(&[2, 1])).contains("ascending"));
        assert!(check_family(own, &ids(&[1, 2, 3])).is_ok());
        assert!(check_family(own, &long[..32]).is_ok());
        // A count byte above the bound is refused before the ids are read.
        let mut bytes = vec![33];
        bytes.extend(std::iter::repeat_n(0, 33 * 32));
        assert!(matches!(
            get_family(&mut Reader::new(&bytes)),
            Err(DescriptorError::Malformed {
                field: "family",
                ..
            })
        ));
    }
}
