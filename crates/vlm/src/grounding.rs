//! Boxes in a model's answer, in each family's native grounding format ([`BoxFormat`], which a
//! family names), mapped back to the original image's pixels.
//!
//! - Qwen2.5-VL writes JSON, `[{"bbox_2d": [x1, y1, x2, y2], "label": "..."}]` (often inside a
//!   fenced `json` block), in pixels of the *resized* image the vision tower saw.
//! - Qwen2-VL writes `<|object_ref_start|>label<|object_ref_end|><|box_start|>(x1,y1),(x2,y2)<|box_end|>`
//!   on a 0-1000 scale of the image.
//! - Qwen3-VL writes Qwen2.5-VL's JSON, but on a 0-1000 scale of the image (its cookbooks'
//!   grounding prompts), so its boxes do not depend on the resize.
//!
//! Parsing is strict: a box is taken only when it is complete and well-formed, and a malformed
//! one makes the whole answer `unparseable` rather than being guessed at.

use serde::{Deserialize, Serialize};

/// How a family's answers write boxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoxFormat {
    /// `<|box_start|>(x1,y1),(x2,y2)<|box_end|>` on a 0-1000 scale of the image (Qwen2-VL).
    BoxTokensPerMille,
    /// `[{"bbox_2d": [x1, y1, x2, y2]}]` in pixels of the resized image (Qwen2.5-VL).
    JsonResizedPixels,
    /// The same JSON on a 0-1000 scale of the image (Qwen3-VL and later).
    JsonPerMille,
}

/// What came of looking for boxes in one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BoxStatus {
    /// At least one box, every one inside the image.
    Ok,
    /// The answer holds no box.
    NoBox,
    /// The answer starts a box it does not finish, or writes one that does not parse.
    Unparseable,
    /// A box parses but lies (partly) outside the image, or has no area.
    OutsideImage,
}

impl BoxStatus {
    /// The status as the release's `box_status` column writes it.
    pub fn name(self) -> &'static str {
        match self {
            BoxStatus::Ok => "ok",
            BoxStatus::NoBox => "no_box",
            BoxStatus::Unparseable => "unparseable",
            BoxStatus::OutsideImage => "outside_image",
        }
    }
}

/// One box in the original image's pixels: (x1, y1) top left, (x2, y2) bottom right.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageBox {
    pub label: Option<String>,
    pub x1: f64,
    pub y1: f64,
    pub x2: f64,
    pub y2: f64,
}

impl ImageBox {
    pub fn area(&self) -> f64 {
        (self.x2 - self.x1).max(0.0) * (self.y2 - self.y1).max(0.0)
    }

    /// The area this box shares with another.
    pub fn intersection(&self, other: &ImageBox) -> f64 {
        let w = (self.x2.min(other.x2) - self.x1.max(other.x1)).max(0.0);
        let h = (self.y2.min(other.y2) - self.y1.max(other.y1)).max(0.0);
        w * h
    }

    /// Intersection over union with another box.
    pub fn iou(&self, other: &ImageBox) -> f64 {
        let inter = self.intersection(other);
        let union = self.area() + other.area() - inter;
        if union > 0.0 {
            inter / union
        } else {
            0.0
        }
    }
}

/// The boxes of one answer and its status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Grounding {
    pub status: BoxStatus,
    /// Every box of an `ok` or `outside_image` answer (clipped to the image for the latter).
    pub boxes: Vec<ImageBox>,
}

/// The geometry a family's coordinates refer to.
#[derive(Debug, Clone, Copy)]
pub struct ImageGeometry {
    /// The original image (width, height) in pixels.
    pub original: (u32, u32),
    /// The resized image the vision tower saw (height, width), a multiple of the patch grid.
    pub resized: (usize, usize),
}

/// Reads the boxes of `answer`, written in `format` (a family's [`crate::Family::box_format`]).
pub fn parse(format: BoxFormat, answer: &str, geometry: ImageGeometry) -> Grounding {
    let raw = match format {
        BoxFormat::BoxTokensPerMille => parse_box_tokens(answer),
        BoxFormat::JsonResizedPixels | BoxFormat::JsonPerMille => parse_json_boxes(answer),
    };
    let boxes = match raw {
        Err(status) => return Grounding { status, boxes: Vec::new() },
        Ok(boxes) if boxes.is_empty() => return Grounding { status: BoxStatus::NoBox, boxes: Vec::new() },
        Ok(boxes) => boxes,
    };
    // The coordinate frame: the resized image's pixels, or 0-1000.
    let (frame_w, frame_h) = match format {
        BoxFormat::JsonResizedPixels => (geometry.resized.1 as f64, geometry.resized.0 as f64),
        BoxFormat::BoxTokensPerMille | BoxFormat::JsonPerMille => (1000.0, 1000.0),
    };
    let (w, h) = (f64::from(geometry.original.0), f64::from(geometry.original.1));
    let mut status = BoxStatus::Ok;
    let boxes = boxes
        .into_iter()
        .map(|(label, [x1, y1, x2, y2])| {
            if x1 < 0.0 || y1 < 0.0 || x2 > frame_w || y2 > frame_h || x1 >= x2 || y1 >= y2 {
                status = BoxStatus::OutsideImage;
            }
            let sx = |v: f64| v.clamp(0.0, frame_w) * w / frame_w;
            let sy = |v: f64| v.clamp(0.0, frame_h) * h / frame_h;
            ImageBox { label, x1: sx(x1), y1: sy(y1), x2: sx(x2), y2: sy(y2) }
        })
        .collect();
    Grounding { status, boxes }
}

type RawBox = (Option<String>, [f64; 4]);

#[derive(Deserialize)]
struct JsonBox {
    bbox_2d: [f64; 4],
    label: Option<String>,
}

/// Qwen2.5-VL: a JSON list of objects with `bbox_2d` (or one such object), fenced or not.
fn parse_json_boxes(answer: &str) -> Result<Vec<RawBox>, BoxStatus> {
    let Some(start) = answer.find(['[', '{']) else {
        return if answer.contains("bbox_2d") { Err(BoxStatus::Unparseable) } else { Ok(Vec::new()) };
    };
    let body = answer[start..].trim_end();
    let body = body.strip_suffix("```").unwrap_or(body).trim_end();
    let boxes: Vec<JsonBox> = if body.starts_with('[') {
        serde_json::from_str(body).map_err(|_| BoxStatus::Unparseable)?
    } else {
        vec![serde_json::from_str(body).map_err(|_| BoxStatus::Unparseable)?]
    };
    Ok(boxes.into_iter().map(|b| (b.label, b.bbox_2d)).collect())
}

const BOX_START: &str = "<|box_start|>";
const BOX_END: &str = "<|box_end|>";
const REF_START: &str = "<|object_ref_start|>";
const REF_END: &str = "<|object_ref_end|>";

/// Qwen2-VL: `<|object_ref_start|>label<|object_ref_end|>` (optional) then
/// `<|box_start|>(x1,y1),(x2,y2)<|box_end|>`, as often as there are boxes.
fn parse_box_tokens(answer: &str) -> Result<Vec<RawBox>, BoxStatus> {
    let mut boxes = Vec::new();
    let mut rest = answer;
    while let Some(open) = rest.find(BOX_START) {
        let label = rest[..open].rfind(REF_START).and_then(|r| {
            let named = &rest[r + REF_START.len()..open];
            named.find(REF_END).map(|e| named[..e].trim().to_string())
        });
        let inner = &rest[open + BOX_START.len()..];
        let close = inner.find(BOX_END).ok_or(BoxStatus::Unparseable)?;
        boxes.push((label, corner_pair(&inner[..close]).ok_or(BoxStatus::Unparseable)?));
        rest = &inner[close + BOX_END.len()..];
    }
    Ok(boxes)
}

/// `(x1,y1),(x2,y2)`, spaces allowed.
fn corner_pair(text: &str) -> Option<[f64; 4]> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let (a, b) = compact.strip_prefix('(')?.strip_suffix(')')?.split_once("),(")?;
    let point = |p: &str| -> Option<(f64, f64)> {
        let (x, y) = p.split_once(',')?;
        Some((x.parse().ok()?, y.parse().ok()?))
    };
    let ((x1, y1), (x2, y2)) = (point(a)?, point(b)?);
    Some([x1, y1, x2, y2])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1024x1024 NIH image, resized to 1036x1036 by smart_resize.
    const NIH: ImageGeometry = ImageGeometry { original: (1024, 1024), resized: (1036, 1036) };

    fn status(format: BoxFormat, answer: &str) -> BoxStatus {
        parse(format, answer, NIH).status
    }

    #[test]
    fn qwen2_5_vl_answers() {
        let table = [
            (r#"[{"bbox_2d": [100, 200, 300, 400], "label": "nodule"}]"#, BoxStatus::Ok, 1),
            ("```json\n[\n\t{\"bbox_2d\": [1, 2, 30, 40], \"label\": \"mass\"}\n]\n```", BoxStatus::Ok, 1),
            (r#"{"bbox_2d": [1, 2, 30, 40]}"#, BoxStatus::Ok, 1),
            (r#"[{"bbox_2d": [1, 2, 30, 40], "label": "a"}, {"bbox_2d": [500, 600, 700, 800], "label": "b"}]"#, BoxStatus::Ok, 2),
            ("There is a nodule in the right upper zone.", BoxStatus::NoBox, 0),
            (r#"[{"label": "nodule"}]"#, BoxStatus::Unparseable, 0),
            (r#"[{"bbox_2d": [100, 200, 300"#, BoxStatus::Unparseable, 0),
            (r#"[{"bbox_2d": [100, 200, 1100, 400]}]"#, BoxStatus::OutsideImage, 1),
            (r#"[{"bbox_2d": [300, 200, 100, 400]}]"#, BoxStatus::OutsideImage, 1),
            // The resized image's edges are inside; one pixel past them is not.
            (r#"[{"bbox_2d": [0, 0, 1036, 1036]}]"#, BoxStatus::Ok, 1),
            (r#"[{"bbox_2d": [0, 0, 1037, 1036]}]"#, BoxStatus::OutsideImage, 1),
            (r#"[{"bbox_2d": [-1, 0, 10, 10]}]"#, BoxStatus::OutsideImage, 1),
            (r#"[{"bbox_2d": [1, 2, 30]}]"#, BoxStatus::Unparseable, 0),
        ];
        for (answer, want, n) in table {
            let g = parse(BoxFormat::JsonResizedPixels, answer, NIH);
            assert_eq!((g.status, g.boxes.len()), (want, n), "{answer}");
        }
    }

    #[test]
    fn qwen2_vl_answers() {
        let table = [
            ("<|object_ref_start|>nodule<|object_ref_end|><|box_start|>(100,200),(300,400)<|box_end|>", BoxStatus::Ok, 1),
            ("<|box_start|>(0,0),(1000,1000)<|box_end|>", BoxStatus::Ok, 1),
            ("<|box_start|>(1, 2), (3, 4)<|box_end|> and <|box_start|>(5,6),(7,8)<|box_end|>", BoxStatus::Ok, 2),
            ("<|object_ref_start|>nodule<|object_ref_end|> is not seen", BoxStatus::NoBox, 0),
            ("<|box_start|>(100,200),(300", BoxStatus::Unparseable, 0),
            ("<|box_start|>(100,200)<|box_end|>", BoxStatus::Unparseable, 0),
            ("<|box_start|>(100,200),(1001,400)<|box_end|>", BoxStatus::OutsideImage, 1),
            ("<|box_start|>(-1,0),(10,10)<|box_end|>", BoxStatus::OutsideImage, 1),
            ("<|box_start|>(1000,1000),(1000,1000)<|box_end|>", BoxStatus::OutsideImage, 1),
            ("<|box_start|>(a,b),(c,d)<|box_end|>", BoxStatus::Unparseable, 0),
        ];
        for (answer, want, n) in table {
            let g = parse(BoxFormat::BoxTokensPerMille, answer, NIH);
            assert_eq!((g.status, g.boxes.len()), (want, n), "{answer}");
        }
        assert_eq!(status(BoxFormat::BoxTokensPerMille, ""), BoxStatus::NoBox);
    }

    #[test]
    fn boxes_map_back_to_the_original_pixels() {
        // Qwen2.5-VL: resized pixels; 1036 -> 1024.
        let g = parse(BoxFormat::JsonResizedPixels, r#"[{"bbox_2d": [0, 518, 1036, 1036], "label": "effusion"}]"#, NIH);
        assert_eq!(g.boxes[0], ImageBox { label: Some("effusion".into()), x1: 0.0, y1: 512.0, x2: 1024.0, y2: 1024.0 });
        // A 128x128 sample image resized to 140x140, and a non-square one.
        let sample = ImageGeometry { original: (128, 128), resized: (140, 140) };
        let g = parse(BoxFormat::JsonResizedPixels, r#"[{"bbox_2d": [35, 70, 70, 140]}]"#, sample);
        assert_eq!((g.boxes[0].x1, g.boxes[0].y1, g.boxes[0].x2, g.boxes[0].y2), (32.0, 64.0, 64.0, 128.0));
        let wide = ImageGeometry { original: (2000, 1000), resized: (504, 1008) };
        let g = parse(BoxFormat::JsonResizedPixels, r#"[{"bbox_2d": [504, 252, 1008, 504]}]"#, wide);
        assert_eq!((g.boxes[0].x1, g.boxes[0].y1, g.boxes[0].x2, g.boxes[0].y2), (1000.0, 500.0, 2000.0, 1000.0));
        // Qwen2-VL: 0-1000 of the image, whatever its size; the edges map to the edges.
        let g = parse(BoxFormat::BoxTokensPerMille, "<|box_start|>(0,500),(1000,1000)<|box_end|>", wide);
        // Qwen3-VL: the same 0-1000 frame, written as JSON in a fenced block.
        let qwen3 = parse(BoxFormat::JsonPerMille, "```json\n[{\"bbox_2d\": [0, 500, 1000, 1000], \"label\": \"effusion\"}]\n```", wide);
        assert_eq!(qwen3.boxes, g.boxes.iter().map(|b| ImageBox { label: Some("effusion".into()), ..b.clone() }).collect::<Vec<_>>());
        assert_eq!(parse(BoxFormat::JsonPerMille, r#"[{"bbox_2d": [0, 0, 1036, 10]}]"#, NIH).status, BoxStatus::OutsideImage);
        assert_eq!((g.boxes[0].x1, g.boxes[0].y1, g.boxes[0].x2, g.boxes[0].y2), (0.0, 500.0, 2000.0, 1000.0));
    }

    #[test]
    fn iou() {
        let a = ImageBox { label: None, x1: 0.0, y1: 0.0, x2: 10.0, y2: 10.0 };
        let b = ImageBox { label: None, x1: 5.0, y1: 0.0, x2: 15.0, y2: 10.0 };
        assert!((a.iou(&b) - 50.0 / 150.0).abs() < 1e-12);
        assert_eq!(a.iou(&a), 1.0);
    }
}
