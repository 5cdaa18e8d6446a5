//! The fixture scorer: a deterministic stand-in for a VLM, so the pipeline can be built, tested
//! and benchmarked without weights. Its scores carry no medical information: they are a hash of
//! the image bytes and the question. Builds that use it are demos, and publish refuses them.

use super::{Answer, FeatureDefinition, ImageAnswers, ImageInput, InferError, Scorer, ScorerIdentity, YesNo};
use crate::hashing::stable_u64;
use crate::release_spec::{Backend, ModelSpec, Question};

pub struct FixtureScorer {
    identity: ScorerIdentity,
}

impl FixtureScorer {
    pub fn new(model: &ModelSpec) -> Self {
        FixtureScorer {
            identity: ScorerIdentity {
                backend: Backend::Fixture,
                model_id: model.id.clone(),
                revision: model.revision.clone(),
                commit: None,
                weights_sha256: None,
                fixture: true,
                preprocessing: serde_json::json!({ "decode": "png" }),
                generation: None,
            },
        }
    }

    /// Per-question keys: hashed once per question set, not once per image.
    pub fn question_keys(questions: &[Question]) -> Vec<(u64, u64)> {
        questions.iter().map(|q| (stable_u64(&["target", &q.target]), stable_u64(&["question", &q.id]))).collect()
    }

    /// The scores of one image from its digest alone (the bench scores without pixels).
    pub fn score_digest(image_sha256: &str, keys: &[(u64, u64)]) -> Vec<YesNo> {
        let image = u64::from_str_radix(&image_sha256[..16.min(image_sha256.len())], 16).unwrap_or(0);
        keys.iter()
            .map(|&(target, question)| {
                // Per (image, target): a latent in [-4, 4) shared by the target's paraphrases ...
                let latent = unit(splitmix(image ^ target)) * 8.0 - 4.0;
                // ... and per question a smaller disagreement, so paraphrases are not unanimous.
                let noise = unit(splitmix(image ^ question)) * 2.0 - 1.0;
                YesNo { logit_yes: (latent + noise) as f32, logit_no: 0.0 }
            })
            .collect()
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

impl Scorer for FixtureScorer {
    fn identity(&self) -> &ScorerIdentity {
        &self.identity
    }

    fn score(&self, image: &ImageInput<'_>, questions: &[Question]) -> Result<Vec<YesNo>, InferError> {
        Ok(Self::score_digest(image.sha256, &Self::question_keys(questions)))
    }

    /// A box in Qwen2-VL's format (0-1000 scale) drawn from a hash of the image and the prompt:
    /// it exercises the parser and the columns, and locates nothing.
    fn generate(
        &self,
        images: &[ImageInput<'_>],
        prompts: &[&[String]],
        settings: &super::DecodingSettings,
    ) -> Result<Vec<ImageAnswers>, InferError> {
        Ok(images
            .iter()
            .zip(prompts)
            .map(|(image, prompts)| {
                let answers = prompts.iter().map(|p| fixture_answer(image.sha256, p, settings)).collect();
                let (w, h) = (image.image.width(), image.image.height());
                ImageAnswers { original: (w, h), resized: (h as usize, w as usize), answers }
            })
            .collect())
    }

    fn family(&self) -> &'static str {
        "qwen2_vl"
    }

    /// Its scores, and the same vectors as [`Self::image_features`], as the native engine keeps
    /// them from its scoring pass.
    fn score_pass_with_features(
        &self,
        images: &[ImageInput<'_>],
        questions: &[Question],
        definition: FeatureDefinition,
    ) -> Result<super::ScoresAndFeatures, InferError> {
        Ok((self.score_pass(images, questions)?, Some(self.image_features(images, definition)?)))
    }

    /// Sixteen numbers drawn from a hash of the image's bytes and the definition: they exercise
    /// the features' path and carry no information about the image.
    fn image_features(&self, images: &[ImageInput<'_>], definition: FeatureDefinition) -> Result<Vec<Vec<f32>>, InferError> {
        Ok(images
            .iter()
            .map(|image| {
                let seed = match definition {
                    FeatureDefinition::VisionTowerMean => stable_u64(&["fixture-features", image.sha256]),
                    other => stable_u64(&["fixture-features", image.sha256, other.name()]),
                };
                (0..16u64).map(|k| (unit(splitmix(seed ^ k)) * 2.0 - 1.0) as f32).collect()
            })
            .collect())
    }
}

/// What the fixture "writes" for a prompt, in the format the prompt asks for: a box (S2's
/// grounding prompts), a `<think>`/`<answer>` pair with a findings list (S3's prompts ask it to
/// think), or a short report (S4's prompts ask for a report). Every choice is a hash of the
/// image and the prompt. With thinking on, S3's answer is a thinking model's turn instead: the
/// chat template's `<think>` block, then the findings list, and one answer in eight runs out of
/// tokens inside the block.
fn fixture_answer(image_sha256: &str, prompt: &str, settings: &super::DecodingSettings) -> Answer {
    let h = splitmix(stable_u64(&["fixture-box", image_sha256, prompt]));
    let at = |shift: u32, span: u64| (h >> shift) % span;
    if prompt.to_lowercase().contains("think") {
        const FINDINGS: [&str; 6] = ["Atelectasis", "Cardiomegaly", "Effusion", "Nodule", "Pneumothorax", "Edema"];
        let listed: Vec<&str> = FINDINGS.iter().enumerate().filter(|(k, _)| at(*k as u32 * 4, 3) == 0).map(|(_, f)| *f).collect();
        let reasoning = format!(
            "Fixture reasoning {:04x}: the {} region of the image was read.",
            at(40, 0x10000),
            ["upper", "middle", "lower"][at(56, 3) as usize]
        );
        let findings = if listed.is_empty() { "No Finding".to_string() } else { listed.join(", ") };
        if settings.thinking == bpals_vlm::Thinking::On {
            if at(60, 8) == 0 {
                let text = format!("<think>\n{reasoning} Still reading the");
                return Answer { text, new_tokens: settings.max_new_tokens, truncated: true };
            }
            return Answer { text: format!("<think>\n{reasoning}\n</think>\n\n{findings}"), new_tokens: 30, truncated: false };
        }
        let text = format!("<think>{reasoning}</think><answer>{findings}</answer>");
        return Answer { text, new_tokens: 24, truncated: false };
    }
    if prompt.to_lowercase().contains("report") {
        const SENTENCES: [&str; 8] = [
            "There is a small left pleural effusion.",
            "Mild cardiomegaly.",
            "No pneumothorax.",
            "Right lower lobe atelectasis.",
            "Possible right upper lobe pneumonia.",
            "No focal consolidation.",
            "A nodule is seen in the left upper lobe.",
            "The lungs are otherwise clear.",
        ];
        let text: Vec<&str> = (0..3).map(|k| SENTENCES[at(8 * k, 8) as usize]).collect();
        return Answer { text: text.join(" "), new_tokens: 30, truncated: false };
    }
    let (x1, y1) = (100 + at(0, 500), 100 + at(16, 500));
    let (x2, y2) = (x1 + 60 + at(32, 300), y1 + 60 + at(48, 300));
    let text = format!("<|box_start|>({x1},{y1}),({x2},{y2})<|box_end|>");
    Answer { text, new_tokens: 12, truncated: false }
}
