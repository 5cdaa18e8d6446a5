//! DSSE envelopes (github.com/secure-systems-lab/dsse, v1.0): a payload, its type, and
//! signatures over the pre-authentication encoding (PAE) of both. Both of the release's signed
//! files carry an in-toto Statement this way.

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::keys::{PublicKey, SigningKey};

/// The payload type of an in-toto statement.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// Base64 of the payload bytes.
    pub payload: String,
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    /// Base64 of the DER ECDSA signature.
    pub sig: String,
    #[serde(default)]
    pub keyid: String,
}

/// The bytes a DSSE signature covers: `DSSEv1 <len(type)> <type> <len(body)> <body>`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {payload_type} {} ", payload_type.len(), payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

impl Envelope {
    /// Signs `payload` (an in-toto statement) with `key`; `keyid` names the key for readers.
    pub fn sign(payload: &[u8], key: &SigningKey, keyid: &str) -> Envelope {
        let sig = key.sign(&pae(IN_TOTO_PAYLOAD_TYPE, payload));
        Envelope {
            payload: b64().encode(payload),
            payload_type: IN_TOTO_PAYLOAD_TYPE.into(),
            signatures: vec![EnvelopeSignature { sig: b64().encode(sig), keyid: keyid.into() }],
        }
    }

    /// The payload, once one signature checks with `key`; otherwise why not.
    pub fn open(&self, key: &PublicKey) -> Result<Vec<u8>, String> {
        if self.payload_type != IN_TOTO_PAYLOAD_TYPE {
            return Err(format!("payload type {:?}, expected {IN_TOTO_PAYLOAD_TYPE:?}", self.payload_type));
        }
        let payload = b64().decode(&self.payload).map_err(|e| format!("the payload is not base64 ({e})"))?;
        if self.signatures.is_empty() {
            return Err("the envelope holds no signature".into());
        }
        let message = pae(&self.payload_type, &payload);
        for signature in &self.signatures {
            let Ok(der) = b64().decode(&signature.sig) else { continue };
            if key.verify(&message, &der) {
                return Ok(payload);
            }
        }
        Err(format!("no signature in it was made by the key {}", key.fingerprint()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_spec_example() {
        // The worked example of the DSSE protocol document.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }
}
