//! The one error type of nyx-daemon.

use std::path::PathBuf;

/// Everything that can go wrong in nyx-daemon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ConfigRead {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The configuration file is not valid TOML or does not match the schema (unknown key,
    /// wrong type). The message names the key and the line.
    #[error("config file {path}: {message}")]
    ConfigSyntax {
        /// The file (or `<string>` for text not from a file).
        path: PathBuf,
        /// The parser's description, with the key and position.
        message: String,
    },
    /// The configuration parsed but holds values that cannot work.
    #[error("config file {path}: {problems}")]
    ConfigInvalid {
        /// The file (or `<string>`).
        path: PathBuf,
        /// Every problem, each with its field.
        problems: nyx_core::config::ConfigProblems,
    },
    /// The directory file could not be read.
    #[error("cannot read directory {path}: {source}")]
    DirectoryRead {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The directory file's header is missing or wrong, so none of it was used.
    #[error("directory {path}: {source}")]
    DirectoryInvalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: crate::directory::DirectoryError,
    },
    /// A test network could not be generated (bad spec, key generation or signing failed).
    #[error("testnet generation: {reason}")]
    Testnet {
        /// What went wrong.
        reason: String,
    },
}
