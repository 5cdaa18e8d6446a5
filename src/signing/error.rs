//! What can go wrong reading keys and signing. No variant holds key bytes or a password.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    #[error("cannot read the key file {}", path.display())]
    ReadKey {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("key file {}: {why}", path.display())]
    Key { path: PathBuf, why: String },
    #[error(
        "key file {} is password-protected: set BPALS_SIGN_KEY_PASSWORD, or run on a terminal to be asked",
        path.display()
    )]
    NeedsPassword { path: PathBuf },
    #[error("key file {}: wrong password (or a damaged key)", path.display())]
    WrongPassword { path: PathBuf },
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("refusing to sign {}: it does not verify against its manifest:\n{problems}", dir.display())]
    Unverified { dir: PathBuf, problems: String },
    #[error(
        "the signing key (fingerprint {fingerprint}) is not the publisher key the spec names in publish.public_key \
         ({named}, fingerprint {named_fingerprint})"
    )]
    NotThePublisherKey { fingerprint: String, named: String, named_fingerprint: String },
    #[error(transparent)]
    Release(#[from] crate::manifest::ManifestError),
}
