//! The settings a family reads from config.json beyond the fields every family shares: one arm
//! per family that has any. The shared config types hold them (`TextConfig::own`,
//! `VisionConfig::own`), so the shared code names no family; each family's types are its
//! folder's `config.rs`. This file and those leaves import nothing else of the engine, so the
//! shared types can hold them without an import circle.

use serde::Serialize;

use super::gemma4::config::{Gemma4Text, Gemma4Vision};

/// A decoder's own settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum OwnText {
    /// The shared fields say it all (the Qwen families).
    Shared,
    Gemma4(Gemma4Text),
}

impl OwnText {
    pub fn gemma4(&self) -> Option<&Gemma4Text> {
        match self {
            OwnText::Gemma4(g) => Some(g),
            OwnText::Shared => None,
        }
    }

    pub fn gemma4_mut(&mut self) -> Option<&mut Gemma4Text> {
        match self {
            OwnText::Gemma4(g) => Some(g),
            OwnText::Shared => None,
        }
    }

    /// Placeholders of media the engine does not feed (video, audio), which a prompt may not
    /// hold: Gemma 4 has them; the Qwen families' are not tokens of their prompts.
    pub fn other_media_token_ids(&self) -> &[u32] {
        match self {
            OwnText::Gemma4(g) => &g.other_media_token_ids,
            OwnText::Shared => &[],
        }
    }
}

/// A vision tower's own settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum OwnVision {
    /// The shared fields say it all (the Qwen families).
    Shared,
    Gemma4(Gemma4Vision),
}

impl OwnVision {
    pub fn gemma4(&self) -> Option<&Gemma4Vision> {
        match self {
            OwnVision::Gemma4(g) => Some(g),
            OwnVision::Shared => None,
        }
    }
}
