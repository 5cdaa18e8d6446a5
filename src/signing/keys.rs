//! The publisher's key pair, read from PEM files: elliptic-curve keys on P-256 or P-384, the
//! curves OpenSSF model_signing's `key` method signs with (it also takes P-521, which this tool
//! does not yet). Private keys come as PKCS#8 (`openssl genpkey`), SEC1 (`openssl ecparam
//! -genkey`) or password-encrypted PKCS#8 (`openssl genpkey -aes256`, `openssl pkcs8 -topk8`).

use std::path::Path;

use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey, LineEnding};
use pkcs8::der::oid::ObjectIdentifier;
use pkcs8::der::pem;
use sha2::{Digest, Sha256};

use super::SigningError;

const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const SECP256R1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const SECP384R1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");

/// Names of key types people try, for the error that turns them away.
fn key_type_name(algorithm: ObjectIdentifier, curve: Option<ObjectIdentifier>) -> String {
    match (algorithm.to_string().as_str(), curve.map(|c| c.to_string())) {
        ("1.2.840.113549.1.1.1", _) | ("1.2.840.113549.1.1.10", _) => "an RSA key".into(),
        ("1.3.101.112", _) => "an Ed25519 key".into(),
        ("1.3.101.113", _) => "an Ed448 key".into(),
        ("1.2.840.10045.2.1", Some(c)) if c == "1.3.132.0.35" => "a P-521 key".into(),
        ("1.2.840.10045.2.1", Some(c)) if c == "1.3.132.0.10" => "a secp256k1 key".into(),
        ("1.2.840.10045.2.1", Some(c)) => format!("an elliptic-curve key on curve {c}"),
        (other, _) => format!("a key of algorithm {other}"),
    }
}

const SUPPORTED: &str =
    "elliptic-curve keys on P-256 or P-384 (for example `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    P256,
    P384,
}

impl Curve {
    fn from_oid(oid: ObjectIdentifier) -> Option<Curve> {
        match oid {
            SECP256R1 => Some(Curve::P256),
            SECP384R1 => Some(Curve::P384),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Curve::P256 => "P-256",
            Curve::P384 => "P-384",
        }
    }
}

/// A private key that signs releases. Its bytes never leave this type: no Debug, no Display.
pub struct SigningKey {
    key: PrivateKey,
    public: PublicKey,
}

enum PrivateKey {
    P256(p256::ecdsa::SigningKey),
    P384(p384::ecdsa::SigningKey),
}

/// A public key that checks release signatures.
#[derive(Clone)]
pub struct PublicKey {
    key: VerifyingKey,
    /// SubjectPublicKeyInfo, DER.
    spki: Vec<u8>,
}

#[derive(Clone)]
enum VerifyingKey {
    P256(p256::ecdsa::VerifyingKey),
    P384(p384::ecdsa::VerifyingKey),
}

/// Whether the PEM file at `path` holds a password-protected key (so the caller knows to ask
/// for a password before [`SigningKey::load`]).
pub fn is_encrypted(path: &Path) -> Result<bool, SigningError> {
    let text = read_key_file(path)?;
    Ok(text.contains("ENCRYPTED"))
}

fn read_key_file(path: &Path) -> Result<String, SigningError> {
    let bytes = std::fs::read(path).map_err(|source| SigningError::ReadKey { path: path.to_path_buf(), source })?;
    String::from_utf8(bytes).map_err(|_| bad_key(path, "is not a PEM text file"))
}

fn bad_key(path: &Path, why: impl Into<String>) -> SigningError {
    SigningError::Key { path: path.to_path_buf(), why: why.into() }
}

impl SigningKey {
    /// Reads the private key at `path`; `password` opens an encrypted one.
    pub fn load(path: &Path, password: Option<&str>) -> Result<SigningKey, SigningError> {
        let text = read_key_file(path)?;
        if text.contains("Proc-Type: 4,ENCRYPTED") {
            return Err(bad_key(
                path,
                "uses OpenSSL's legacy PEM encryption; convert it to encrypted PKCS#8 with \
                 `openssl pkcs8 -topk8 -v2 aes-256-cbc -in OLD.pem -out NEW.pem`",
            ));
        }
        let (label, der) = pem::decode_vec(text.trim().as_bytes()).map_err(|e| bad_key(path, format!("is not a PEM key ({e})")))?;
        let der = p256::elliptic_curve::zeroize::Zeroizing::new(der);
        let key = match label {
            "PRIVATE KEY" => pkcs8_key(path, &der)?,
            "ENCRYPTED PRIVATE KEY" => {
                let Some(password) = password else {
                    return Err(SigningError::NeedsPassword { path: path.to_path_buf() });
                };
                let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice())
                    .map_err(|e| bad_key(path, format!("is not a valid encrypted PKCS#8 key ({e})")))?;
                let plain = info.decrypt(password).map_err(|_| SigningError::WrongPassword { path: path.to_path_buf() })?;
                pkcs8_key(path, plain.as_bytes())?
            }
            "EC PRIVATE KEY" => sec1_key(path, &der)?,
            "RSA PRIVATE KEY" => return Err(bad_key(path, format!("is an RSA key; release signing takes {SUPPORTED}"))),
            "PUBLIC KEY" => return Err(bad_key(path, "is a public key; signing needs the private key")),
            other => return Err(bad_key(path, format!("holds a PEM block {other:?}, not a private key"))),
        };
        let public = match &key {
            PrivateKey::P256(k) => PublicKey::from_verifying(VerifyingKey::P256(*k.verifying_key())),
            PrivateKey::P384(k) => PublicKey::from_verifying(VerifyingKey::P384(*k.verifying_key())),
        };
        Ok(SigningKey { key, public })
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// ECDSA over `message` with the curve's hash (SHA-256 on P-256, SHA-384 on P-384), as
    /// model_signing and the DSSE verifiers expect; DER-encoded. Deterministic (RFC 6979).
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        use p256::ecdsa::signature::Signer;
        match &self.key {
            PrivateKey::P256(k) => {
                let signature: p256::ecdsa::Signature = k.sign(message);
                signature.to_der().as_bytes().to_vec()
            }
            PrivateKey::P384(k) => {
                let signature: p384::ecdsa::Signature = k.sign(message);
                signature.to_der().as_bytes().to_vec()
            }
        }
    }
}

fn pkcs8_key(path: &Path, der: &[u8]) -> Result<PrivateKey, SigningError> {
    let info = pkcs8::PrivateKeyInfo::try_from(der).map_err(|e| bad_key(path, format!("is not a valid PKCS#8 key ({e})")))?;
    let curve = info.algorithm.parameters_oid().ok();
    if info.algorithm.oid != EC_PUBLIC_KEY || curve.and_then(Curve::from_oid).is_none() {
        return Err(bad_key(path, format!("is {}; release signing takes {SUPPORTED}", key_type_name(info.algorithm.oid, curve))));
    }
    let invalid = |e: pkcs8::Error| bad_key(path, format!("is not a valid elliptic-curve key ({e})"));
    Ok(match curve.and_then(Curve::from_oid) {
        Some(Curve::P256) => PrivateKey::P256(p256::ecdsa::SigningKey::from_pkcs8_der(der).map_err(invalid)?),
        Some(Curve::P384) => PrivateKey::P384(p384::ecdsa::SigningKey::from_pkcs8_der(der).map_err(invalid)?),
        None => unreachable!("checked above"),
    })
}

fn sec1_key(path: &Path, der: &[u8]) -> Result<PrivateKey, SigningError> {
    let key = sec1::EcPrivateKey::try_from(der).map_err(|e| bad_key(path, format!("is not a valid SEC1 key ({e})")))?;
    let curve = key.parameters.and_then(|p| p.named_curve());
    let invalid = |e: p256::elliptic_curve::Error| bad_key(path, format!("is not a valid elliptic-curve key ({e})"));
    match curve.and_then(Curve::from_oid) {
        Some(Curve::P256) => Ok(PrivateKey::P256(p256::SecretKey::from_sec1_der(der).map(p256::ecdsa::SigningKey::from).map_err(invalid)?)),
        Some(Curve::P384) => Ok(PrivateKey::P384(p384::SecretKey::from_sec1_der(der).map(p384::ecdsa::SigningKey::from).map_err(invalid)?)),
        None => Err(bad_key(path, format!("is {}; release signing takes {SUPPORTED}", key_type_name(EC_PUBLIC_KEY, curve)))),
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({} {})", self.curve().name(), self.fingerprint())
    }
}

impl PublicKey {
    fn from_verifying(key: VerifyingKey) -> PublicKey {
        let spki = match &key {
            VerifyingKey::P256(k) => k.to_public_key_der(),
            VerifyingKey::P384(k) => k.to_public_key_der(),
        }
        .expect("a valid curve point encodes")
        .into_vec();
        PublicKey { key, spki }
    }

    /// Reads a public key (`-----BEGIN PUBLIC KEY-----`, as `openssl pkey -pubout` writes it).
    pub fn load(path: &Path) -> Result<PublicKey, SigningError> {
        let text = read_key_file(path)?;
        Self::from_pem(&text).map_err(|why| bad_key(path, why))
    }

    /// Reads a public key from PEM text; the error says what is wrong with it.
    pub fn from_pem(text: &str) -> Result<PublicKey, String> {
        let (label, der) = pem::decode_vec(text.trim().as_bytes()).map_err(|e| format!("is not a PEM key ({e})"))?;
        if label != "PUBLIC KEY" {
            return Err(format!("holds a PEM block {label:?}; expected a PUBLIC KEY (`openssl pkey -in KEY.pem -pubout`)"));
        }
        let info =
            pkcs8::spki::SubjectPublicKeyInfoRef::try_from(der.as_slice()).map_err(|e| format!("is not a valid public key ({e})"))?;
        let curve = info.algorithm.parameters_oid().ok();
        let invalid = |e: pkcs8::spki::Error| format!("is not a valid elliptic-curve public key ({e})");
        let key = match (info.algorithm.oid == EC_PUBLIC_KEY, curve.and_then(Curve::from_oid)) {
            (true, Some(Curve::P256)) => VerifyingKey::P256(p256::ecdsa::VerifyingKey::from_public_key_der(&der).map_err(invalid)?),
            (true, Some(Curve::P384)) => VerifyingKey::P384(p384::ecdsa::VerifyingKey::from_public_key_der(&der).map_err(invalid)?),
            _ => return Err(format!("is {}; release signatures use {SUPPORTED}", key_type_name(info.algorithm.oid, curve))),
        };
        Ok(Self::from_verifying(key))
    }

    pub fn curve(&self) -> Curve {
        match self.key {
            VerifyingKey::P256(_) => Curve::P256,
            VerifyingKey::P384(_) => Curve::P384,
        }
    }

    /// The key's fingerprint: sha256 of its DER SubjectPublicKeyInfo, in hex. Anyone can compute
    /// it with `openssl pkey -pubin -in KEY.pub.pem -outform DER | sha256sum`.
    pub fn fingerprint(&self) -> String {
        hex::encode(Sha256::digest(&self.spki))
    }

    /// The key as PEM text, 64-column lines with LF endings (what OpenSSL and Python's
    /// `cryptography` write).
    pub fn to_pem(&self) -> String {
        pem::encode_string("PUBLIC KEY", LineEnding::LF, &self.spki).expect("PEM of a small key")
    }

    /// model_signing's key hint: sha256 of the key's PEM text.
    pub fn model_signing_hint(&self) -> String {
        hex::encode(Sha256::digest(self.to_pem().as_bytes()))
    }

    /// Checks a DER-encoded ECDSA signature over `message`.
    pub fn verify(&self, message: &[u8], signature_der: &[u8]) -> bool {
        use p256::ecdsa::signature::Verifier;
        match &self.key {
            VerifyingKey::P256(k) => p256::ecdsa::Signature::from_der(signature_der).is_ok_and(|s| k.verify(message, &s).is_ok()),
            VerifyingKey::P384(k) => p384::ecdsa::Signature::from_der(signature_der).is_ok_and(|s| k.verify(message, &s).is_ok()),
        }
    }
}
