//! The relay directory: signed relay descriptors, exit policies, declared families and the
//! text document that lists them.
//!
//! Sans-IO: callers pass the wall-clock time (Unix seconds) to everything that checks
//! validity; nothing here touches the file system (the daemon reads directory files).
//! [`consensus`] holds the authorities' votes and the consensus clients accept; [`request`]
//! the messages of a directory stream; [`authority`] a directory authority; [`testnet`]
//! generates the keys and directory of a local test network.

pub mod authority;
mod codec;
pub mod consensus;
mod descriptor;
mod document;
mod error;
mod family;
mod policy;
pub mod request;
pub mod testnet;

pub use descriptor::{
    Descriptor, DescriptorBuilder, MAX_CLOCK_SKEW, MAX_DESCRIPTOR_VALIDITY, MAX_NICKNAME_LEN,
    MAX_ONION_CERTS, MAX_ONION_KEY_LIFETIME, SIGNATURE_CONTEXT, VERSION,
};
pub use document::{Directory, DirectoryError, Rejected};
pub use error::DescriptorError;
pub use family::{MAX_FAMILY, same_family};
pub(crate) use policy::canonical;
pub use policy::{
    Action, AddrPattern, ExitPolicy, ExitRule, ExitTarget, MAX_RULES, PolicyError, PortRange,
};
